"""The worker's side of a change of a ready deployment's replica count (console.deployments.changes planned it, kept
the deployment ready and sent SCALE): the replicas serving keep serving throughout.

- More replicas: the added ones start on the GPUs the plan gave them and join the gateway's route once their /health
  answers (console.deployments.watching); a crashed replica waiting for its restart is left to it. An added one that
  fails to start or to load is ended alone and the count goes back (``added_replica_failed``); the deployment stays
  ready on the others.
- Fewer: the last replicas (the newest) leave the route first (the routing version bumped), SETTLE_SECONDS let every
  gateway take the news, then each is stopped once its engine reads no request running or waiting for QUIET_SECONDS
  (its /metrics, the engine's own gauges), or after DRAIN_SECONDS whatever it still runs; each look is the scale's
  heartbeat.
- A scale whose worker died (more or fewer replicas live than the count, or one never started, and no sign of life for
  HEARTH_STALE_AFTER seconds) is carried on by reconcile (``resume_stale_scales``).
"""

import logging
import time
from dataclasses import replace
from datetime import timedelta

import httpx
from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from appliance.runtimes import RuntimeError_, RuntimeStatus, get_runtime
from console.deployments import dispatch
from console.deployments.launching import WATCH_EVERY
from console.deployments.lifecycle import end_replica, new_replica, start_replica
from console.deployments.models import Deployment, DeploymentState, Replica
from console.fanout import bump_routing_version
from engines.external import EXTERNAL_ENGINE, EXTERNAL_RUNTIME
from engines.metric_mappings import DEFAULT_MAPPINGS
from engines.metrics import choose_flavor, parse_metrics, sample_names

log = logging.getLogger(__name__)
S = DeploymentState
SETTLE_SECONDS = 2.0  # gateway.registry.RECHECK_EVERY: a gateway that missed the announcement has re-read by then
DRAIN_SECONDS = 120.0  # seconds a removed replica's requests in flight get to end before it stops anyway
POLL_EVERY = 0.5  # seconds between looks at a draining engine's requests
# seconds a draining engine must show no request running or waiting, look after look, before it stops: a request a
# gateway sent it before re-reading the route (or a stream the client was still opening) has reached it by then
QUIET_SECONDS = 3.0


def scale(deployment_id: int) -> None:
    """Make a ready deployment run its ``replica_count`` replicas without stopping those that serve: create and start
    the missing ones, or drain and stop the newest ones over the count. Does nothing once it is no longer ready."""
    dep = Deployment.objects.filter(pk=deployment_id).select_related("model").first()
    if dep is None or dep.state != S.READY:
        return
    live = live_replicas(dep)
    if len(live) > dep.replica_count:
        _remove(dep, live[dep.replica_count :])
    else:
        _add(dep, live)


def scale_words(old: int, new: int) -> str:
    """What a change of the count from ``old`` to ``new`` replicas does, in the preview's words."""
    if new > old:
        serving = "the replica serving keeps" if old == 1 else f"the {old} replicas serving keep"
        added = "the added one starts beside it and joins" if new - old == 1 else "the added ones start and join"
        return (
            f"{serving} serving and {'its GPUs' if old == 1 else 'their GPUs'}; {added} the gateway's route once ready."
        )
    gone = "the newest replica leaves" if old - new == 1 else f"the {old - new} newest replicas leave"
    then = "then it stops" if old - new == 1 else "then they stop"
    return (
        f"{gone} the gateway's route, its requests in flight end (up to {DRAIN_SECONDS:.0f} s), {then}; "
        f"{'the other keeps' if new == 1 else f'the {new} others keep'} serving."
    )


def live_replicas(dep: Deployment) -> list[Replica]:
    """The replicas Hearth launched that are not ended (serving, loading, draining or waiting for a restart), in slot
    order."""
    return list(dep.replicas.launched().filter(stopped_at__isnull=True).order_by("pk"))


def _add(dep: Deployment, live: list[Replica]) -> None:
    runtime = get_runtime()
    while len(live) < dep.replica_count:
        live.append(new_replica(dep, runtime))
    unstarted = [r for r in live if _never_started(r)]  # the added: the last slots
    for replica in unstarted:
        try:
            start_replica(replica, live.index(replica), runtime)
        except RuntimeError_ as exc:
            _give_up(dep, unstarted[unstarted.index(replica) :], f"the added replica did not start: {exc}")
            return
        log.info("deployment %s: added replica %s", dep.name, replica.runtime_name)
        dispatch.send(dispatch.WATCH_REPLICA, replica.pk, countdown=WATCH_EVERY)


def _never_started(replica: Replica) -> bool:
    """Created by a scale and not started yet (a crashed replica is not: it waits for its restart, or is ending)."""
    return not replica.running and replica.restart_at is None and replica.ready_at is None and not replica.restarts


def resume_stale_scales() -> None:
    """Send SCALE again for each ready deployment whose live replicas differ from its count, or with one never
    started, silent for HEARTH_STALE_AFTER seconds (its worker died mid-scale)."""
    stale = timezone.now() - timedelta(seconds=settings.HEARTH_STALE_AFTER)
    live = Q(replicas__stopped_at__isnull=True) & ~Q(replicas__runtime=EXTERNAL_RUNTIME)
    never = Q(replicas__running=False, replicas__restart_at__isnull=True, replicas__ready_at__isnull=True)
    unstarted = live & never & Q(replicas__restarts=0)
    ready = Deployment.objects.filter(state=S.READY, updated_at__lt=stale).exclude(engine=EXTERNAL_ENGINE)
    counted = ready.annotate(live=Count("replicas", filter=live), unstarted=Count("replicas", filter=unstarted))
    for dep in counted:
        if dep.live != dep.replica_count or dep.unstarted:
            if Deployment.objects.filter(pk=dep.pk, updated_at=dep.updated_at).update(updated_at=timezone.now()):
                log.warning("deployment %s: its change of replica count lost its worker; resuming", dep.name)
                dispatch.send(dispatch.SCALE, dep.pk)


def added_replica_failed(replica: Replica, reason: str) -> bool:
    """A replica that never served nor crashed was ended (``reason``: why). When its deployment is ready and serves on
    other replicas, a change of the count had added it: set the count back, the others serving on (True). False
    otherwise: the caller fails the launch, as for a first launch."""
    dep = replica.deployment
    serving = dep.replicas.filter(running=True, ready_at__isnull=False).exclude(pk=replica.pk)
    if replica.restarts or dep.state != S.READY or not serving.exists():
        return False
    _give_up(dep, [], f"the added replica {replica.runtime_name} failed: {reason}")
    return True


def _give_up(dep: Deployment, added: list[Replica], why: str) -> None:
    """End ``added`` and set the count to the replicas left, each keeping its GPUs (the added are the last slots)."""
    for replica in added:
        end_replica(replica, RuntimeStatus(running=replica.running), "")
    left = dep.replicas.launched().filter(stopped_at__isnull=True).count()
    plan = dep.stored_plan
    kept = replace(plan, gpu_indices=plan.gpu_indices[: left * plan.tensor_parallel_size])
    Deployment.objects.filter(pk=dep.pk).update(replica_count=left, plan=kept.to_json())
    dep.progress(f"Serving on {left} replica{'s' if left > 1 else ''}; {why.rstrip('.')}.")
    log.warning("deployment %s: scaling back to %s replicas: %s", dep.name, left, why)
    bump_routing_version()


def _remove(dep: Deployment, extra: list[Replica]) -> None:
    Replica.objects.filter(pk__in=[r.pk for r in extra]).update(ready_at=None)
    bump_routing_version()
    time.sleep(SETTLE_SECONDS)
    deadline = time.monotonic() + DRAIN_SECONDS
    for replica in extra:
        replica.refresh_from_db()
        quiet_since: float | None = None
        while replica.running and time.monotonic() < deadline:
            now = time.monotonic()
            if _requests_on(dep, replica):
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= QUIET_SECONDS:
                break
            dep.progress(dep.state_reason)  # the heartbeat resume_stale_scales reads
            time.sleep(POLL_EVERY)
        end_replica(replica, RuntimeStatus(running=replica.running), "")
        log.info("deployment %s: removed replica %s", dep.name, replica.runtime_name)
    dep.progress("Serving.")


def _requests_on(dep: Deployment, replica: Replica) -> float:
    """Requests the engine runs or queues now (its /metrics); 0 when it cannot say (not listening: nothing to wait
    for; no such gauges: the drain is the settle alone); 1 when it answers too slowly to read (a loaded box: its
    streams may still be running, so the drain goes on waiting, up to its deadline)."""
    try:
        text = httpx.get(f"{replica.base_url}/metrics", timeout=5).text
        flavor = choose_flavor(dep.engine, dep.engine_version, sample_names(text), DEFAULT_MAPPINGS)
        values = parse_metrics(text, flavor, time.time()).values if flavor else {}
    except httpx.TimeoutException:
        return 1.0
    except (httpx.HTTPError, ValueError, KeyError):
        return 0.0
    return values.get("requests_running", 0.0) + values.get("requests_waiting", 0.0)
