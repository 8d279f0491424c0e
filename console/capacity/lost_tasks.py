"""Capacity checks and tunings whose task was lost before they started: still queued LOST_AFTER after their creation
while no task waits in the long queue, where theirs would (a worker takes one only with a process free,
appliance.settings CELERY_WORKER_DISABLE_PREFETCH). Their task went with a Redis that restarted empty or a worker
killed as it took it; console.capacity.runs and .tuning fail them with LOST_WORDS."""

from datetime import timedelta

from django.db.models import QuerySet
from django.utils import timezone

from appliance import celery_heartbeats
from console.capacity.models import CapacityRun, RunState, Tuning

# a running check or tuning silent this long lost its worker (a crash, a restart, make down's cold shutdown): 90 of
# its heartbeats (console.capacity.runs.WATCH_EVERY_S) missed
STALE_AFTER = timedelta(seconds=45)
LOST_AFTER = 3 * STALE_AFTER  # queued that long, no task waiting: its task was lost
LOST_WORDS = "Its task was lost before it started (Redis restarted, or a worker stopped); start it again."


def lost[Queued: (CapacityRun, Tuning)](rows: QuerySet[Queued]) -> QuerySet[Queued]:
    """Those of ``rows`` (capacity runs or tunings) lost before they started (module docstring); none while the long
    queue cannot be read."""
    queued = rows.filter(state=RunState.QUEUED, created_at__lt=timezone.now() - LOST_AFTER)
    if not queued.exists() or celery_heartbeats.read().long_waiting != 0:
        return rows.none()
    return queued
