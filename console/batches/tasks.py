"""The batch runner's Celery entry points: run this appliance's batches (acks late: a worker killed with it running
leaves the message to be delivered again, and beat's sweep does not wait for that), and the sweep that starts the
runner when a batch runs without one (beat, every 10 s, and once when a worker starts)."""

import asyncio
from datetime import timedelta
from typing import Any

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from console.batches import dispatch, runner
from console.batches.models import RUNNING, Batch

ADOPT_SECONDS = 300  # a batch of another instance whose runner was not seen this long is adopted by the sweep


@shared_task(name=dispatch.RUN, acks_late=True)
def run_batch(batch_pk: int) -> None:
    """Run this appliance's running batches, batch ``batch_pk`` among them, until none is left (console.batches.
    runner); nothing when another runner holds the lease."""
    asyncio.run(runner.run())


@shared_task(name=dispatch.SWEEP)
def sweep_batches() -> None:
    """Send run_batch when one of this appliance's batches (its HEARTH_INSTANCE's) is validating, in progress,
    finalizing or cancelling and no runner holds the lease; first adopt a running batch of another instance whose
    runner was last seen ADOPT_SECONDS ago (its appliance was restored here from a backup, or renamed)."""
    running = Batch.objects.filter(status__in=RUNNING)
    lapsed = timezone.now() - timedelta(seconds=ADOPT_SECONDS)
    orphans = running.exclude(instance=settings.HEARTH_INSTANCE).filter(
        Q(runner_seen_at__lt=lapsed) | Q(runner_seen_at=None, created_at__lt=lapsed)
    )
    orphans.update(instance=settings.HEARTH_INSTANCE)
    mine = runner.running()
    if mine and not runner.lease_held():
        dispatch.run(mine[0])


@worker_ready.connect
def sweep_at_start(**kwargs: Any) -> None:
    """A worker that starts sweeps at once (batches whose runner died before it lapsed are swept by beat after)."""
    sweep_batches.apply_async(expires=120)
