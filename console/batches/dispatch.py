"""The one seam that enqueues the batch runner: by name (``send_task``), so the gateway, which creates batches,
imports no task module (console.batches.tasks is the worker's entry point)."""

from celery import current_app

RUN = "console.batches.tasks.run_batch"  # (Batch id): run its lines until it ends
SWEEP = "console.batches.tasks.sweep_batches"  # (): start a runner for each batch that runs without one
NAMES = (RUN, SWEEP)


def run(batch_pk: int) -> None:
    """Enqueue the runner of batch ``batch_pk``. Blocking (the broker): call it from a thread in async code.

    Raises kombu's OperationalError when the broker cannot be reached (beat's sweep sends it again)."""
    current_app.send_task(RUN, (batch_pk,))
