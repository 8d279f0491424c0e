"""The batch runner's Celery entry points: run one batch (acks late: a worker killed with it running leaves the
message to be delivered again, and beat's sweep does not wait for that), and the sweep that starts a runner for
every running batch without one (beat, every SWEEP_SECONDS, and once when a worker starts)."""

import asyncio
from typing import Any

from celery import shared_task
from celery.signals import worker_ready

from console.batches import dispatch, runner
from console.batches.models import RUNNING, Batch

SWEEP_SECONDS = 10.0  # beat's period for sweep_batches (appliance.celery.periodic_tasks)


@shared_task(name=dispatch.RUN, acks_late=True)
def run_batch(batch_pk: int) -> None:
    """Run the batch's lines until it ends (console.batches.runner); nothing when another runner has it."""
    asyncio.run(runner.run(batch_pk))


@shared_task(name=dispatch.SWEEP)
def sweep_batches() -> None:
    """Send run_batch for each batch validating, in progress, finalizing or cancelling whose runner's lease lapsed."""
    for pk in Batch.objects.filter(status__in=RUNNING).values_list("pk", flat=True):
        if not runner.lease_held(pk):
            dispatch.run(pk)


@worker_ready.connect
def sweep_at_start(**kwargs: Any) -> None:
    """A worker that starts sweeps at once (batches whose runner died before it lapsed are swept by beat after)."""
    sweep_batches.apply_async(expires=120)
