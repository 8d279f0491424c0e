"""Ending a deployment's engines: a stop the admin asked for, the Recreate of a settings change (the
old replicas stop first, since they hold the GPUs, then the deployment launches with the new plan), and
the appliance going down (``make down``: every engine, in the calling process, the worker being gone)."""

from dataclasses import dataclass

from django.conf import settings

from appliance.runtimes.process import ProcessRuntime
from console.deployments.admin_actions import launch
from console.deployments.lifecycle import end_all
from console.deployments.models import ACTIVE_STATES, Deployment, DeploymentState, DesiredState, Replica
from console.fanout import bump_routing_version
from engines.external import EXTERNAL_ENGINE

S = DeploymentState


def stop(deployment_id: int) -> None:
    """stopping → stopped: end every replica of the deployment and keep its last log lines."""
    dep = Deployment.objects.filter(pk=deployment_id).first()
    if dep is None or dep.state != S.STOPPING:
        return
    end_all(dep)
    dep.move(S.STOPPED, "Stopped by the admin.")


def recreate(deployment_id: int) -> None:
    """stopping → stopped → pending: stop the old replicas first, then launch with the settings
    console.deployments.changes stored."""
    dep = Deployment.objects.filter(pk=deployment_id).first()
    if dep is None or dep.state != S.STOPPING:
        return
    end_all(dep)
    bump_routing_version()
    if dep.move(S.STOPPED, "Stopped to recreate with the new settings."):
        launch(dep)


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
