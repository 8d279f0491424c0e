"""Celery entry points of the deployments domain: each takes an id and calls the domain function that
re-reads the row and does nothing when it is gone or already moved on (console.deployments.launching,
watching, stopping, reconciling). Domain code enqueues these by name through console.deployments.dispatch.
"""

from celery import shared_task

from console.deployments import dispatch, launching, reconciling, stopping, watching


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


@shared_task(name=dispatch.RECONCILE)
def reconcile() -> None:
    """What should run against what runs (beat, every HEARTH_RECONCILE_INTERVAL seconds)."""
    reconciling.reconcile()
