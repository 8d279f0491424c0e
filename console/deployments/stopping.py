"""Ending a deployment's engines: a stop the admin asked for, and the Recreate of a settings change (the
old replicas stop first, since they hold the GPUs, then the deployment launches with the new plan)."""

from console.deployments.admin_actions import launch
from console.deployments.lifecycle import end_all
from console.deployments.models import Deployment, DeploymentState
from console.fanout import bump_routing_version

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
