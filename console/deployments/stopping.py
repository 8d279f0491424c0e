"""Ending a deployment's engines: a stop the admin asked for, the Recreate of a settings change (the
old replicas stop first, since they hold the GPUs, then the deployment launches with the new plan), each after
the requests in flight had HEARTH_DRAIN_SECONDS to finish (``drain``), and the appliance going down (``make down``:
every engine at once, in the calling process, the worker being gone)."""

import logging
from dataclasses import dataclass

import redis
from django.conf import settings
from django.utils import timezone

from appliance.runtimes.process import ProcessRuntime
from console.deployments import activity
from console.deployments.admin_actions import launch
from console.deployments.lifecycle import end_all
from console.deployments.models import ACTIVE_STATES, Deployment, DeploymentState, DesiredState, Replica
from console.deployments.sleeping import redis_client
from console.fanout import bump_routing_version
from engines.external import EXTERNAL_ENGINE

log = logging.getLogger(__name__)
S = DeploymentState
SETTLE_SECONDS = 2.0  # gateway.registry.RECHECK_EVERY: a gateway that missed the stop's announcement re-read since
POLL_EVERY = 0.2  # seconds between looks at the requests in flight


def stop(deployment_id: int) -> None:
    """stopping → stopped: let the requests in flight finish (drain), end every replica of the deployment and keep
    its last log lines."""
    dep = Deployment.objects.filter(pk=deployment_id).first()
    if dep is None or dep.state != S.STOPPING:
        return
    drain(dep)
    end_all(dep)
    dep.move(S.STOPPED, "Stopped by the admin.")


def recreate(deployment_id: int) -> None:
    """stopping → stopped → pending: let the old replicas' requests in flight finish and stop them first, then
    launch with the settings console.deployments.changes stored."""
    dep = Deployment.objects.filter(pk=deployment_id).first()
    if dep is None or dep.state != S.STOPPING:
        return
    drain(dep)
    end_all(dep)
    bump_routing_version()
    if dep.move(S.STOPPED, "Stopped to recreate with the new settings."):
        launch(dep)


def drain(dep: Deployment) -> None:
    """Wait for the requests in flight of a stopping deployment (console.deployments.activity: the gateway routes no
    new ones to it) to end, for up to HEARTH_DRAIN_SECONDS, its page saying how many are left as that changes; none
    left once the gateways have re-read the routes (SETTLE_SECONDS after the stop was asked), it returns at once.
    Redis not answering ends the wait: the engines then stop as they would have without it. A deployment with no
    engine running (stopped mid-launch) has nothing to drain."""
    if not dep.replicas.launched().filter(stopped_at__isnull=True, running=True).exists():
        return
    seconds = settings.HEARTH_DRAIN_SECONDS

    def say(left: int) -> None:
        requests = "1 request in flight gets" if left == 1 else f"{left} requests in flight get"
        dep.progress(f"Stopping: {requests} up to {seconds} s to finish.")

    client = redis_client()
    try:
        settled_at = dep.state_since.timestamp() + SETTLE_SECONDS
        if not activity.drained(client, dep.pk, seconds, settled_at, say, POLL_EVERY):
            log.info("deployment %s: stopping with requests still in flight after the drain", dep.name)
    except redis.RedisError as exc:
        log.warning("deployment %s: requests in flight not known (%s); stopping without a drain", dep.name, exc)
    finally:
        client.close()


@dataclass(frozen=True)
class Engine:
    """A running engine of this appliance: its deployment's name ("" when no replica owns it), its process
    or container name, and its pid or container id."""

    deployment: str
    name: str
    handle: str


def live_engines() -> list[Engine]:
    """The replicas not yet ended of active or stopping deployments, and the engines no replica owns that
    the process runtime still runs (their pid files under HEARTH_DATA_DIR/engines)."""
    live = Replica.objects.launched().filter(
        stopped_at__isnull=True, deployment__state__in=[*ACTIVE_STATES, S.STOPPING]
    )
    engines = [Engine(r.deployment.name, r.runtime_name, r.handle) for r in live.select_related("deployment")]
    owned = set(Replica.objects.filter(stopped_at__isnull=True).values_list("runtime_name", flat=True))
    runtime = ProcessRuntime(settings.DATA_DIR / "engines")
    for name in sorted(runtime.names() - owned):
        if runtime.status(name).running:
            engines.append(Engine("", name, (runtime.root / f"{name}.pid").read_text().strip()))
    return engines


SHUTDOWN_WORDS = {  # why a deployment is stopped after the appliance went down, by what is wanted of it
    DesiredState.SERVING: "Stopped with the appliance ({by}); the worker launches it again when it is back up.",
    DesiredState.STOPPED_IDLE: "Stopped with the appliance ({by}), as it was put aside; the next request launches "
    "it again.",
    DesiredState.STOPPED: "Stopped by the admin.",
}


def stop_everything(by: str) -> list[Engine]:
    """End every engine live_engines finds, here and now (not through Celery), and move their deployments to
    stopped saying so (``by``: what took the appliance down, "make down"); returns the engines ended. What the
    admin or the idle policy wants is kept: one wanted serving is launched again when the worker is back
    (console.deployments.restoring), one asleep becomes stopped to save (a request launches it), one an admin
    stopped stays stopped. A deployment caught mid-launch stops too; external deployments are not Hearth's to stop
    (their engines run elsewhere)."""
    engines = live_engines()
    for dep in Deployment.objects.filter(state__in=[*ACTIVE_STATES, S.STOPPING]).exclude(engine=EXTERNAL_ENGINE):
        desired = DesiredState.STOPPED_IDLE if dep.desired == DesiredState.ASLEEP else DesiredState(dep.desired)
        reason = SHUTDOWN_WORDS[desired].format(by=by)
        if dep.state == S.STOPPING or dep.move(S.STOPPING, reason):
            end_all(dep)
            dep.move(S.STOPPED, reason, desired=desired)
    runtime = ProcessRuntime(settings.DATA_DIR / "engines")
    for engine in engines:
        if not engine.deployment:
            runtime.stop(engine.name)
    return engines


RESTORED_WORDS = {  # why a restored deployment is stopped, by what was wanted of it (as SHUTDOWN_WORDS)
    DesiredState.SERVING: "Restored from a backup: its engines were the appliance's that made it; the worker launches "
    "it again.",
    DesiredState.STOPPED_IDLE: "Restored from a backup, as it was put aside; the next request launches it again.",
    DesiredState.STOPPED: "Stopped by the admin.",
}


def forget_restored_engines() -> list[str]:
    """After a restore (console.restore), in its transaction: the replicas the archive holds are the engines of the
    appliance that made it, which may still run on this host under the same names and ports (a restore beside it
    routed to them, then reported them dead for good once they stopped). Each is marked ended, no engine touched,
    and its deployment stopped keeping what was wanted, as ``stop_everything`` does: one wanted serving is launched
    again by this appliance's worker under its own names (console.deployments.restoring), one asleep by the next
    request. External deployments keep their endpoints. Returns the names of the deployments stopped."""
    now = timezone.now()
    stopped = []
    for dep in Deployment.objects.filter(state__in=[*ACTIVE_STATES, S.STOPPING]).exclude(engine=EXTERNAL_ENGINE):
        desired = DesiredState.STOPPED_IDLE if dep.desired == DesiredState.ASLEEP else DesiredState(dep.desired)
        reason = RESTORED_WORDS[desired]
        dep.replicas.launched().filter(stopped_at__isnull=True).update(running=False, stopped_at=now, restart_at=None)
        if (dep.state == S.STOPPING or dep.move(S.STOPPING, reason)) and dep.move(S.STOPPED, reason, desired=desired):
            stopped.append(dep.name)
    return stopped
