"""The tuning's wait for its deployment's relaunch (console.capacity.tuning._wait_ready): a recreate passes through
stopped on its way (console.deployments.stopping.recreate), which a loaded full run's tuning once read as the end
("tuned is stopped") and failed; stopped ends the wait only when the deployment is wanted stopped."""

from typing import Any

import pytest

from console.capacity import tuning
from console.deployments.models import Deployment
from tests.test_console_display import a_deployment

pytestmark = pytest.mark.django_db


def in_state(name: str, state: str, reason: str, desired: str = "serving") -> Deployment:
    dep = a_deployment(name, desired=desired)
    Deployment.objects.filter(pk=dep.pk).update(state=state, state_reason=reason)
    dep.refresh_from_db()
    return dep


def waited(dep: Deployment, then: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """What _wait_ready says of ``dep`` when its state becomes ``then`` at its first pause."""

    def pause(seconds: float) -> None:
        Deployment.objects.filter(pk=dep.pk).update(state=then)

    monkeypatch.setattr(tuning.time, "sleep", pause)
    return tuning._wait_ready(dep, tuning_id=0)  # no such tuning: its heartbeat updates no row


def test_a_recreate_s_stopped_step_is_waited_through(monkeypatch: pytest.MonkeyPatch) -> None:
    dep = in_state("tuned", "stopped", "Stopped to recreate with the new settings.")
    assert waited(dep, "ready", monkeypatch) == ""


@pytest.mark.parametrize("desired", ["stopped", "stopped_idle"])
def test_stopped_as_wanted_or_failed_ends_the_wait_saying_why(desired: str, monkeypatch: Any) -> None:
    stopped = in_state("halted", "stopped", "Stopped by the admin.", desired)
    assert waited(stopped, "ready", monkeypatch) == "halted is stopped: Stopped by the admin."
    failed = in_state("broken", "failed", "vLLM exited with 1.")
    assert waited(failed, "ready", monkeypatch) == "broken is failed: vLLM exited with 1."
