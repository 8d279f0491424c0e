"""The out-of-memory remedy of a failed deployment (engines.oom_remedy works out the numbers): shown on its
page, and applied on the admin's confirmation as a change of settings and a new launch."""

from django.db import transaction

from console.audit.recording import record
from console.deployments.admin_actions import launch
from console.deployments.models import Deployment, DeploymentState
from console.errors import ConsoleError
from engines.oom_remedy import Remedy, oom_remedy


def remedy_for(deployment: Deployment) -> Remedy | None:
    """The out-of-memory remedy for a failed deployment whose last run ran out of memory, else None."""
    last = deployment.replicas.launched().order_by("-pk").first()
    if deployment.state != DeploymentState.FAILED or last is None or not (last.oom_killed or last.previous_oom_killed):
        return None
    return oom_remedy(deployment.engine, deployment.stored_plan, deployment.engine_env, deployment.kv_space_gib)


def apply_remedy(deployment: Deployment) -> Remedy:
    """Apply the out-of-memory remedy to a failed deployment and launch it again with it.

    Raises ConsoleError when no remedy applies (it did not run out of memory, or nothing is left to lower).
    """
    remedy = remedy_for(deployment)
    if remedy is None:
        raise ConsoleError(f"{deployment.name} did not fail out of memory, or has no setting left to lower.")
    done = "; ".join(f"{c.name} {c.before} → {c.after}" for c in remedy.changes)
    plan = remedy.plan.noted(f"Out-of-memory remedy applied: {done}.")
    with transaction.atomic():
        if not Deployment.objects.filter(pk=deployment.pk, state=DeploymentState.FAILED).update(
            plan=plan.to_json(), engine_env=remedy.engine_env, kv_space_gib=remedy.kv_space_gib
        ):
            raise ConsoleError(f"{deployment.name} is no longer failed; nothing was changed.")
        deployment.refresh_from_db()
        record(None, "deployment.remedy", deployment, {c.name: [c.before, c.after] for c in remedy.changes})
        launch(deployment)
    return remedy
