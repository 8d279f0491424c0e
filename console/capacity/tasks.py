"""Celery entry points of capacity checks: each takes an id and calls the domain function, which re-reads
the row and does nothing when it is gone or already moved on. Enqueued by name (runs.CHECK,
tuning.TUNE) through console.deployments.dispatch."""

from celery import shared_task

from console.capacity import runs, tuning


@shared_task(name=runs.CHECK)
def run_check(run_id: int) -> None:
    """queued → running → done (or cancelled, failed): the check, through the gateway."""
    runs.run_check(run_id)


@shared_task(name=tuning.TUNE)
def run_tuning(tuning_id: int) -> None:
    """Each value of the knob: apply (a Recreate), wait for ready, check; then the best."""
    tuning.run_tuning(tuning_id)
