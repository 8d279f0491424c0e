"""Sharing the GPUs over time through the real worker (issue 29): simulator deployments launched with an idle policy,
put to sleep or stopped to save by reconcile once idle, woken by the call the gateway makes
(console.deployments.wakeups.request_wake), and a wake that fails ending failed with the engine's reason and no
engine left running.

"Idle for its idle minutes" is made true by moving the deployment's ``state_since`` an hour back in the database
(as if it had served an hour ago and nothing since): the policy's minutes stay whole minutes, as the console offers
them, and no test waits for one; tests/test_sleep_support.py checks the verdict at its edges.
"""

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from appliance.runtimes import get_runtime
from console.audit.models import AuditEntry
from console.deployments.models import Deployment, DeploymentEvent, Replica
from console.deployments.wakeups import request_wake, wake_asked
from tests.conftest import Workers, login
from tests.simworld import ensure_model, wait_state

pytestmark = pytest.mark.django_db(transaction=True)
RECONCILED = 40  # seconds: a few reconcile periods (HEARTH_RECONCILE_INTERVAL, 10 s)


def launched(client: httpx.Client, name: str, **body: object) -> dict[str, Any]:
    ensure_model()
    fields = {"name": name, "model": "llama-8b", "engine": "simulator", "max_model_len": 8192}
    resp = client.post("/api/deployments", json=fields | body)
    assert resp.status_code == 201, resp.text
    dep_id = resp.json()["id"]
    assert client.post(f"/api/deployments/{dep_id}/launch").status_code == 202
    dep = wait_state(client, dep_id, {"ready", "failed"})
    assert dep["state"] == "ready", dep
    return dep


def idle_for_an_hour(dep_id: int) -> None:
    Deployment.objects.filter(pk=dep_id).update(state_since=timezone.now() - timedelta(hours=1))


def engine(dep_id: int) -> Replica:
    return Replica.objects.filter(deployment_id=dep_id).latest("id")


def within(seconds: float, ok: Callable[[], bool]) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        assert time.monotonic() < deadline, "not within the deadline"
        time.sleep(0.3)


def asleep_on_the_engine(replica: Replica) -> bool:
    return bool(httpx.get(f"{replica.base_url}/is_sleeping", timeout=5).json()["is_sleeping"])


def test_an_idle_deployment_sleeps_by_its_policy_and_a_request_s_wake_brings_it_back(
    web: str, worker: Workers, admin_user: object
) -> None:
    client = login(web)
    dep = launched(client, "napper", idle_policy="sleep", idle_minutes=1, sleep_level=1)
    replica = engine(dep["id"])
    assert replica.sleep_mode and not asleep_on_the_engine(replica)
    idle_for_an_hour(dep["id"])
    asleep = wait_state(client, dep["id"], {"asleep", "failed"}, within=RECONCILED)
    assert asleep["state"] == "asleep" and asleep["desired"] == "asleep", asleep
    assert "Idle for 1 h 0 min (policy: sleep after 1 min)." in asleep["state_reason"]
    assert asleep_on_the_engine(replica)
    [slept] = asleep["events"]
    assert (slept["kind"], slept["level"]) == ("sleep", 1) and slept["seconds"] > 1.0  # 16 GB copied at 12 GB/s
    [entry] = AuditEntry.objects.filter(action="deployment.sleep", target_id=str(dep["id"]))
    assert entry.actor_name == "system" and "Idle for 1 h" in entry.changes["reason"]

    assert request_wake(dep["id"]) is True
    assert request_wake(dep["id"]) is False  # one wake, however many ask
    awake = wait_state(client, dep["id"], {"ready", "failed"})
    assert awake["state"] == "ready" and awake["desired"] == "serving" and awake["wake_started_at"] is None, awake
    assert not asleep_on_the_engine(replica)
    woke = awake["events"][0]
    assert woke["kind"] == "wake" and woke["seconds"] > 1.0  # the weights copied back
    assert woke["level"] == 1  # the level it woke from
    within(10, lambda: not wake_asked(dep["id"]))
    key = client.post("/api/keys", json={"name": "napper"}).json()["key"]
    answer = httpx.post(
        f"{web}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "napper", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    client.post(f"/api/deployments/{dep['id']}/stop")
    wait_state(client, dep["id"], {"stopped"})


def test_a_wake_that_fails_ends_failed_with_the_engine_s_reason_and_no_engine_running(
    web: str, worker: Workers, admin_user: object
) -> None:
    client = login(web)
    dep = launched(client, "faulty", idle_policy="sleep", extra_args=["--fault-wake-fails"])
    assert client.post(f"/api/deployments/{dep['id']}/sleep").status_code == 202
    assert wait_state(client, dep["id"], {"asleep", "failed"})["state"] == "asleep"
    assert client.post(f"/api/deployments/{dep['id']}/wake").status_code == 202
    failed = wait_state(client, dep["id"], {"failed", "ready"})
    assert failed["state"] == "failed", failed
    assert "The wake failed: Call to wake_up method failed: CUDA Error: out of memory" in failed["state_reason"]
    assert ". Its engine was stopped (nothing is left half-awake)" in failed["state_reason"]  # the error a sentence
    assert failed["events"][0]["kind"] == "wake_failed" and failed["events"][0]["level"] is not None
    replica = engine(dep["id"])
    assert replica.stopped_at is not None and not replica.running
    assert not get_runtime(replica.runtime).status(replica.runtime_name).running
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{replica.base_url}/health", timeout=2)


def test_an_idle_deployment_with_a_stop_policy_is_stopped_to_save_and_a_wake_launches_it(
    web: str, worker: Workers, admin_user: object
) -> None:
    client = login(web)
    dep = launched(client, "saver", idle_policy="stop", idle_minutes=1)
    first = engine(dep["id"])
    assert not first.sleep_mode  # a stop policy launches no sleep mode
    idle_for_an_hour(dep["id"])
    stopped = wait_state(client, dep["id"], {"stopped", "failed"}, within=RECONCILED)
    assert stopped["state"] == "stopped" and stopped["desired"] == "stopped_idle", stopped
    assert "Stopped to save: Idle for 1 h" in stopped["state_reason"]
    assert stopped["events"][0]["kind"] == "stop_idle"
    assert not get_runtime(first.runtime).status(first.runtime_name).running
    page = client.get(f"/deployments/{dep['id']}/").text
    assert "stopped to save" in page and 'data-event="stop_idle"' in page

    assert request_wake(dep["id"], "A request came for it.") is True
    ready = wait_state(client, dep["id"], {"ready", "failed"})
    assert ready["state"] == "ready" and ready["desired"] == "serving", ready
    woke = ready["events"][0]
    assert woke["kind"] == "wake" and woke["seconds"] > 0 and woke["level"] is None  # a launch, from no level
    assert engine(dep["id"]).pk != first.pk  # a new engine: the wake of a stop is a launch
    assert AuditEntry.objects.filter(action="deployment.wake", target_id=str(dep["id"])).exists()
    client.post(f"/api/deployments/{dep['id']}/stop")
    wait_state(client, dep["id"], {"stopped"})
    assert Deployment.objects.get(pk=dep["id"]).desired == "stopped"
    assert DeploymentEvent.objects.filter(deployment_id=dep["id"]).count() == 2
