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
from console.deployments.models import Deployment, DeploymentState, Replica
from console.deployments.restoring import asleep_engines_gone, relaunch_wanted
from console.deployments.scaling import resume_stale_scales
from console.deployments.watching import engine_ended, restart

log = logging.getLogger(__name__)
S = DeploymentState
LOST_AFTER = 3  # times HEARTH_STALE_AFTER a pending launch may wait, its task in no queue, before it is sent again
LOST_LAUNCH = "Waiting for a worker: the launch's task was lost (Redis restarted, or a worker stopped); sent again."


def reconcile() -> None:
    """Resume launches and changes of replica count whose worker died (console.deployments.scaling), send again the
    launches whose task was lost, launch again the deployments wanted serving that the appliance's stop ended, stop
    to save the asleep ones whose engines are gone (console.deployments.restoring), notice serving engines that
    exited, restart crashed replicas whose backoff is over, and remove engines no replica owns (a database restored
    from backup, a container left by hand); check the endpoints Hearth did not launch (console.deployments.external);
    put idle deployments to sleep or stop them to save, as their policy says, and carry on a sleep or wake whose
    worker died (console.deployments.idling)."""
    _resume_stale_launches()
    _resend_lost_launches()
    resume_stale_scales()
    resume_stale_swaps()
    relaunch_wanted()
    asleep_engines_gone()
    serving = Replica.objects.launched().filter(running=True, ready_at__isnull=False, deployment__state=S.READY)
    for replica in serving:
        status = get_runtime(replica.runtime).status(replica.runtime_name)
        if not status.running:
            engine_ended(replica, status)
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
