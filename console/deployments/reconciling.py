"""Reconcile: compare what should run with what runs, every HEARTH_RECONCILE_INTERVAL seconds and once when the worker
starts, so a worker crash, ``make down`` or a reboot loses nothing (console.deployments.restoring); and apply the
deployments' idle policies (console.deployments.idling)."""

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from appliance import celery_heartbeats
from appliance.runtimes import get_runtime
from console.deployments import dispatch
from console.deployments.external import check_endpoints
from console.deployments.idling import apply_idle_policies, resume_stale_swaps
from console.deployments.models import Deployment, DeploymentState, DesiredState, Replica
from console.deployments.restoring import asleep_engines_gone, relaunch_wanted
from console.deployments.scaling import resume_stale_scales
from console.deployments.watching import check_serving, mend_engine_versions, restart

log = logging.getLogger(__name__)
S = DeploymentState
LOST_AFTER = 3  # times HEARTH_STALE_AFTER a pending launch may wait, its task in no queue, before it is sent again
LOST_LAUNCH = "Waiting for a worker: the launch's task was lost (Redis restarted, or a worker stopped); sent again."
LOST_STOP = "Stopping: its task was lost (Redis restarted, or a worker stopped); sent again."
LOST_STOP_REASON = "its stop was sent again after its task was lost."  # a stop to save's reason, in its last words


def reconcile() -> None:
    """Resume launches and changes of replica count whose worker died (console.deployments.scaling), send again the
    launches and the stops whose task was lost, launch again the deployments wanted serving that the appliance's
    stop ended, stop to save the asleep ones whose engines are gone (console.deployments.restoring), notice serving
    engines that exited, read again the version a ready engine did not tell, restart crashed replicas whose backoff
    is over, and remove engines no replica owns (a database restored from backup, a container left by hand); check
    the endpoints Hearth did not launch (console.deployments.external); put idle deployments to sleep or stop them
    to save, as their policy says, and carry on a sleep or wake whose worker died (console.deployments.idling)."""
    _resume_stale_launches()
    _resend_lost_launches()
    _resend_lost_stops()
    resume_stale_scales()
    resume_stale_swaps()
    relaunch_wanted()
    asleep_engines_gone()
    check_serving()
    mend_engine_versions()
    due = Replica.objects.launched().filter(running=False, stopped_at__isnull=True, restart_at__lte=timezone.now())
    for replica_id in due.values_list("pk", flat=True):
        restart(replica_id)
    _remove_orphans()
    check_endpoints()
    apply_idle_policies()


def _resume_stale_launches() -> None:
    """A launch silent for HEARTH_STALE_AFTER seconds lost its worker: claim it (a conditional update on
    updated_at, so one reconcile wins) and carry it on from the step it was in."""
    stale = timezone.now() - timedelta(seconds=settings.HEARTH_STALE_AFTER)
    for dep in Deployment.objects.filter(state__in=[S.PULLING, S.STARTING, S.LOADING], updated_at__lt=stale):
        if not _claimed(dep):
            continue  # another worker claimed it
        log.warning(
            "deployment %s: no sign of its %s task for %s s; resuming", dep.name, dep.state, settings.HEARTH_STALE_AFTER
        )
        if dep.state == S.LOADING:
            for replica in dep.replicas.launched().filter(running=True, ready_at__isnull=True):
                dispatch.send(dispatch.WATCH_REPLICA, replica.pk)
        else:
            dispatch.send(dispatch.RESUME_LAUNCH, dep.pk)


def _resend_lost_launches() -> None:
    """A launch pending for LOST_AFTER × HEARTH_STALE_AFTER seconds while nothing waits in the long queue lost its
    task (a worker that took it moves it on at once; the margin is for one starved at its start): it went
    with a Redis that restarted empty, or its worker died as it took it, or the broker was away when the launch was
    committed. Claimed as a stale launch is, then sent again as a plain launch: on the free GPUs, or failed saying
    why it does not fit them (a launch made room for does not make room again unasked). A launch waiting for room
    is not stale: its task says so every few seconds."""
    stale = timezone.now() - timedelta(seconds=LOST_AFTER * settings.HEARTH_STALE_AFTER)
    pending = list(Deployment.objects.filter(state=S.PENDING, updated_at__lt=stale))
    if not pending:
        return
    if celery_heartbeats.read().long_waiting != 0:  # its task may still wait its turn there (or Redis is away)
        return
    for dep in pending:
        if _claimed(dep, state_reason=LOST_LAUNCH):
            log.warning(
                "deployment %s: pending for %.0f s with no launch task waiting; sent again",
                dep.name,
                LOST_AFTER * settings.HEARTH_STALE_AFTER,
            )
            dispatch.send(dispatch.LAUNCH, dep.pk)


def _resend_lost_stops() -> None:
    """A stop unchanged for HEARTH_DRAIN_SECONDS + LOST_AFTER × HEARTH_STALE_AFTER seconds lost its task (an upkeep
    task: it drains for HEARTH_DRAIN_SECONDS at most, saying so as the count changes, then ends the engines): it went
    with a Redis that restarted empty, or its worker died. Claimed, then sent again as its desired state says: an
    admin's stop, a stop to save, or else the recreate of a settings change. Each task re-reads the row and does
    nothing once the deployment is stopped; were the first still running, the second ends what it left."""
    stale = timedelta(seconds=settings.HEARTH_DRAIN_SECONDS + LOST_AFTER * settings.HEARTH_STALE_AFTER)
    for dep in Deployment.objects.filter(state=S.STOPPING, updated_at__lt=timezone.now() - stale):
        if not _claimed(dep, state_reason=LOST_STOP):
            continue
        log.warning(
            "deployment %s: stopping for %.0f s with no sign of its task; sent again", dep.name, stale.total_seconds()
        )
        if dep.desired == DesiredState.STOPPED:
            dispatch.send(dispatch.STOP, dep.pk)
        elif dep.desired == DesiredState.STOPPED_IDLE:
            dispatch.send(dispatch.STOP_IDLE, dep.pk, LOST_STOP_REASON)
        else:
            dispatch.send(dispatch.RECREATE, dep.pk)


def _claimed(dep: Deployment, **fields: str) -> bool:
    """Whether this reconcile claimed ``dep`` (still in the state and at the ``updated_at`` it was read with: a
    conditional update that renews ``updated_at`` and sets ``fields``, so one reconcile wins)."""
    unchanged = Deployment.objects.filter(pk=dep.pk, state=dep.state, updated_at=dep.updated_at)
    return bool(unchanged.update(updated_at=timezone.now(), **fields))


def _remove_orphans() -> None:
    """Stop the engines no live replica owns. The engines are listed before the replicas are read: a replica's row
    is saved with its engine's name before the engine starts (console.deployments.lifecycle.new_replica), so an
    engine listed has its row in the read that follows. Read the other way round, a replica added between the two
    reads was stopped while it loaded (a full test run saw it)."""
    runtime = get_runtime()
    running = runtime.names()
    owned = set(Replica.objects.filter(stopped_at__isnull=True).values_list("runtime_name", flat=True))
    for name in running - owned:
        log.warning("removing engine %s: no replica owns it", name)
        runtime.stop(name)
