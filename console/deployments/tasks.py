"""Celery entry points of the deployments domain: each takes an id and calls the domain function that
re-reads the row and does nothing when it is gone or already moved on (console.deployments.launching,
watching, stopping, reconciling, sleeping, room_actions, scaling). Domain code enqueues these by name through
console.deployments.dispatch.
"""

from typing import Any

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

from console.deployments import (
    dispatch,
    launching,
    reconciling,
    room_actions,
    scaling,
    sleeping,
    stopping,
    watching,
)


@shared_task(name=dispatch.LAUNCH)
def launch_deployment(deployment_id: int) -> None:
    """pending → pulling → starting → loading."""
    launching.launch(deployment_id)


@shared_task(name=dispatch.RESUME_LAUNCH)
def resume_launch(deployment_id: int) -> None:
    """Carry on a launch whose worker died, from the step it was in."""
    launching.resume(deployment_id)


@shared_task(name=dispatch.WATCH_REPLICA)
def watch_replica(replica_id: int) -> None:
    """Poll a loading replica's /health until it is ready or its engine ends."""
    watching.watch(replica_id)


@shared_task(name=dispatch.RESTART_REPLICA)
def restart_replica(replica_id: int) -> None:
    """Start a crashed replica again once its backoff is over."""
    watching.restart(replica_id)


@shared_task(name=dispatch.STOP)
def stop_deployment(deployment_id: int) -> None:
    """stopping → stopped."""
    stopping.stop(deployment_id)


@shared_task(name=dispatch.RECREATE)
def recreate_deployment(deployment_id: int) -> None:
    """stopping → stopped → pending, with the new settings."""
    stopping.recreate(deployment_id)


@shared_task(name=dispatch.SLEEP)
def sleep_deployment(deployment_id: int, reason: str) -> None:
    """sleeping → asleep (console.deployments.idle_actions claimed it)."""
    sleeping.sleep(deployment_id, reason)


@shared_task(name=dispatch.WAKE)
def wake_deployment(deployment_id: int, reason: str, audited: bool = False, consent: bool = False) -> None:
    """asleep → waking → ready, or the launch of one stopped to save (console.deployments.wakeups asked for it),
    once room is made for it (console.deployments.room_actions; ``consent``: an admin's, for a stay policy)."""
    room_actions.wake(deployment_id, reason, audited, consent)


@shared_task(name=dispatch.STOP_IDLE)
def stop_idle_deployment(deployment_id: int, reason: str) -> None:
    """stopping → stopped, to save (console.deployments.idle_actions claimed it)."""
    sleeping.stop_to_save(deployment_id, reason)


@shared_task(name=dispatch.LAUNCH_WHEN_ROOM)
def launch_when_room(deployment_id: int, consent: bool) -> None:
    """pending → the launch, once idle deployments are put aside to make room for it."""
    room_actions.launch_when_room(deployment_id, consent)


@shared_task(name=dispatch.SCALE)
def scale_deployment(deployment_id: int) -> None:
    """A ready deployment's replicas to its count, those serving left serving (console.deployments.changes)."""
    scaling.scale(deployment_id)


@shared_task(name=dispatch.CHECK_SERVING)
def check_serving(deployment_id: int) -> None:
    """Whether the deployment's serving engines still run, now: the gateway reached none of them
    (console.deployments.engine_checks)."""
    watching.check_serving(deployment_id)


@shared_task(name=dispatch.RECONCILE)
def reconcile() -> None:
    """What should run against what runs (beat, every HEARTH_RECONCILE_INTERVAL seconds)."""
    reconciling.reconcile()


@worker_ready.connect
def reconcile_at_start(**kwargs: Any) -> None:
    """A worker that starts reconciles at once, not at beat's next tick: the deployments wanted serving when the
    appliance went down launch again (console.deployments.restoring)."""
    reconcile.apply_async(expires=settings.HEARTH_RECONCILE_INTERVAL)
