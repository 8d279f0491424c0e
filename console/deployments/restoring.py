"""What was wanted survives a restart (issue 28): after ``make down``, a reboot or a restart of the worker, every
deployment an admin wants serving serves again by itself, as ``restart: unless-stopped`` brings containers back;
one an admin stopped stays stopped. The worker runs this at its start (console.deployments.tasks) and in each
reconcile:

- ``relaunch_wanted``: a deployment stopped while its ``desired`` is still serving (``Deployment.relaunch_due``:
  ``make down`` ended its engines, console.deployments.stopping) is launched as an admin's Launch would
  (admin_actions.launch: room made by its rules, the audit entry saying why). One that cannot be launched yet (no
  room) says why in its reason and is tried again at the next reconcile. A request for it meanwhile is held and
  asks for the same launch as a wake (gateway.holding, console.deployments.sleeping), whichever comes first.
- ``asleep_engines_gone``: an asleep deployment whose engines no longer run (the machine restarted under it) cannot
  be woken in place: it becomes stopped to save, so the next request launches it again.

A ready deployment whose engines are gone after a reboot is a crash to the reconcile (console.deployments.watching
restarts its replicas), and a launch cut by the restart is carried on (reconciling's stale launches).
"""

import logging

import redis

from appliance.runtimes import get_runtime
from console.deployments.admin_actions import launch
from console.deployments.lifecycle import end_all
from console.deployments.models import Deployment, DeploymentState, DesiredState
from console.errors import ConsoleError
from console.fanout import bump_routing_version
from engines.external import EXTERNAL_ENGINE
from engines.stored_plan import PlanVersionError

log = logging.getLogger(__name__)
S = DeploymentState
NOT_YET = "Not launched again yet: "  # the reason of one wanted serving that could not be launched (tried again)
ASLEEP_GONE = (
    "Its engine ended while it was asleep (the machine or the appliance restarted); the next request launches it again."
)


def relaunch_wanted() -> list[str]:
    """Launch every deployment stopped while wanted serving (module docstring); returns the names launched."""
    launched = []
    wanted = Deployment.objects.filter(state=S.STOPPED, desired=DesiredState.SERVING, model__isnull=False)
    for dep in wanted.exclude(engine=EXTERNAL_ENGINE).select_related("model").order_by("pk"):  # what Hearth launches
        try:
            launch(dep, why="Wanted serving when the appliance went down; launched again by the worker.")
        except (ConsoleError, PlanVersionError, redis.RedisError) as exc:
            _not_yet(dep, str(exc))
            continue
        log.info("deployment %s: wanted serving, launched again", dep.name)
        launched.append(dep.name)
    return launched


def _not_yet(dep: Deployment, why: str) -> None:
    """Say why ``dep`` is not launched again (logged once per new reason); a launch that came first is no news."""
    fresh = Deployment.objects.filter(pk=dep.pk).first()
    if fresh is None or not fresh.relaunch_due:
        return
    words = NOT_YET + why
    if fresh.state_reason != words and fresh.progress(words):
        log.warning("deployment %s: %s", dep.name, words)


def asleep_engines_gone() -> list[str]:
    """Stop to save every asleep deployment whose engines no longer run (module docstring); returns their names."""
    gone = []
    for dep in Deployment.objects.filter(state=S.ASLEEP).exclude(engine=EXTERNAL_ENGINE):
        live = dep.replicas.launched().filter(stopped_at__isnull=True, running=True)
        if not live.exists():
            continue
        if any(get_runtime(r.runtime).status(r.runtime_name).running for r in live):
            continue
        if dep.move(S.STOPPING, ASLEEP_GONE, desired=DesiredState.STOPPED_IDLE):
            end_all(dep)
            dep.move(S.STOPPED, ASLEEP_GONE)
            log.warning("deployment %s: %s", dep.name, ASLEEP_GONE)
            gone.append(dep.name)
    if gone:
        bump_routing_version()
    return gone
