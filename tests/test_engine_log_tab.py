"""A deployment's replicas as its page's Log tab (console/deployments/templates/deployments/deployment.html's ``logs``
partial) and the API show them: an engine that ended with exit code 0 (vLLM, stopped by a SIGTERM from outside
Hearth, exits cleanly) reads "exit code 0", not "unknown", only a run whose code was never read is unknown; the API
lists every replica the deployment ran, saying which ended."""

import pytest
from django.test import Client
from django.utils import timezone

from console.deployments.models import Deployment, Replica
from tests.test_console_replicas import _running

pytestmark = pytest.mark.django_db


def _restarted(previous_exit_code: int | None) -> Deployment:
    """A ready simulator deployment whose one replica was restarted once after its engine ended (rows only)."""
    dep = _running("logged", [0])
    Replica.objects.filter(deployment=dep).update(
        restarts=1,
        log_tail="INFO: serving\n",
        previous_log_tail="INFO: Shutting down\n",
        previous_exit_code=previous_exit_code,
    )
    return dep


@pytest.mark.parametrize(("code", "said"), [(0, "exit code 0"), (-9, "exit code -9"), (None, "exit code unknown")])
def test_the_previous_runs_exit_code_is_shown_as_read_zero_included(admin: Client, code: int | None, said: str) -> None:
    page = admin.get(f"/deployments/{_restarted(code).pk}/logs/").content.decode()
    assert f"Previous run: {said}</summary>" in page
    assert "restarted 1× after its engine ended" in page


def test_the_api_says_which_of_the_replicas_a_deployment_ran_ended(admin: Client) -> None:
    dep = _restarted(0)
    ended = Replica.objects.create(deployment=dep, runtime="process", host="h", port=2, stopped_at=timezone.now())
    listed = admin.get(f"/api/deployments/{dep.pk}").json()["replicas"]
    assert [r["id"] for r in listed] == sorted(r["id"] for r in listed) and listed[1]["id"] == ended.pk
    assert listed[0]["stopped_at"] is None and listed[1]["stopped_at"] and all(r["started_at"] for r in listed)
