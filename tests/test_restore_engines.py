"""A restored archive's replicas are the engines of the appliance that made it, which may run on this host under the
same names and ports: the restore marks them ended without touching any engine, and stops their deployments keeping
what was wanted, so this appliance's worker launches its own (console.deployments.stopping.forget_restored_engines).
A trial's restore beside the source served from the source's engine, then reported its deployment ready and every
request 503 once that engine stopped. No process is started: an engine touched would fail this test."""

import pytest

from console.deployments.models import Deployment, DeploymentState, DesiredState, Replica
from console.deployments.stopping import forget_restored_engines
from tests.ledgerworld import serve_model

pytestmark = pytest.mark.django_db
S = DeploymentState


def test_restored_replicas_are_ended_and_their_deployments_stopped_keeping_what_was_wanted() -> None:
    ready, napping, parked = serve_model(9, "chat"), serve_model(10, "napper"), serve_model(11, "parked")
    Deployment.objects.filter(pk=ready.pk).update(desired=DesiredState.SERVING)
    Deployment.objects.filter(pk=napping.pk).update(state=S.ASLEEP, desired=DesiredState.ASLEEP)
    Deployment.objects.filter(pk=parked.pk).update(state=S.STOPPED, desired=DesiredState.STOPPED)
    Replica.objects.filter(deployment=parked).update(running=False)

    assert sorted(forget_restored_engines()) == ["chat", "napper"]

    rows = {d.name: d for d in Deployment.objects.all()}
    assert (rows["chat"].state, rows["chat"].desired) == (S.STOPPED, DesiredState.SERVING)
    assert rows["chat"].state_reason.startswith("Restored from a backup: its engines were the appliance's that made it")
    assert (rows["napper"].state, rows["napper"].desired) == (S.STOPPED, DesiredState.STOPPED_IDLE)
    assert rows["chat"].relaunch_due  # the worker's reconcile launches it again (console.deployments.restoring)
    assert (rows["parked"].state, rows["parked"].state_reason) == (S.STOPPED, "")  # an admin's stop stays as it was
    ended = Replica.objects.filter(deployment__name__in=["chat", "napper"])
    assert [(r.running, r.stopped_at is not None) for r in ended] == [(False, True)] * 2
