"""Idle policies in the console and the API (console.deployments.idle_settings, idle_actions): set on create and
on change, refused with why where the engine cannot, the states and transitions of a sleep and a wake, and the
launch an idle policy of sleep makes. No process: the worker's side is tests/test_sleep_live.py."""

import os
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from console.audit.models import AuditEntry
from console.catalog.models import ModelSource
from console.deployments import admin_actions
from console.deployments.lifecycle import launch_spec
from console.deployments.models import (
    TRANSITIONS,
    Deployment,
    DeploymentEvent,
    DeploymentState,
    DesiredState,
    Replica,
)
from tests.simworld import ensure_model

pytestmark = pytest.mark.django_db
JSON = "application/json"
S = DeploymentState


def create(admin: Client, **body: object) -> tuple[int, dict[str, object]]:
    ensure_model()
    base = {"name": "d", "model": "llama-8b", "engine": "simulator", "max_model_len": 8192}
    resp = admin.post("/api/deployments", base | body, content_type=JSON)
    return resp.status_code, resp.json()


def test_a_policy_is_set_on_create_and_shown(admin: Client) -> None:
    status, dep = create(admin, idle_policy="sleep", idle_minutes=5, sleep_level=2)
    assert status == 201, dep
    assert (dep["idle_policy"], dep["idle_minutes"], dep["sleep_level"], dep["always_on"]) == ("sleep", 5, 2, False)
    assert dep["desired"] == "stopped" and dep["events"] == [] and dep["wake_started_at"] is None
    page = admin.get(f"/deployments/{dep['id']}/").content.decode()
    assert "sleep (level 2) after 5 min idle<" in page  # HEARTH_MIN_RESIDENCY (2 min) is shorter: not said
    Deployment.objects.filter(pk=dep["id"]).update(idle_minutes=1)
    page = admin.get(f"/deployments/{dep['id']}/").content.decode()
    assert "sleep (level 2) after 1 min idle, once up 2 min<" in page  # why it sleeps later than a minute
    Deployment.objects.filter(pk=dep["id"]).update(idle_minutes=5, sleep_level=1)
    page = admin.get(f"/deployments/{dep['id']}/").content.decode()
    assert "sleep (level 1) after 5 min idle<" in page  # its 8B's weights fit this host's RAM


def test_a_level_1_sleep_bigger_than_the_hosts_ram_says_it_stops_instead(admin: Client) -> None:
    """A trial's 70B at level 1 on a 23 GiB host was stopped at every idle, with no word of it before."""
    status, dep = create(admin, idle_policy="sleep", idle_minutes=5, sleep_level=1)
    assert status == 201, dep
    row = Deployment.objects.get(pk=dep["id"])
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    row.plan = {**row.plan, "weights_bytes": ram * 2}
    row.save(update_fields=["plan"])
    page = admin.get(f"/deployments/{dep['id']}/").content.decode()
    assert "sleep (level 1) after 5 min idle (a level-1 sleep copies its " in page
    assert ": it is stopped instead; level 2 keeps no copy)<" in page


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"engine": "vllm-cpu", "max_model_len": 2048, "idle_policy": "sleep"}, "vLLM (CPU) has no sleep mode"),
        ({"idle_policy": "sleep", "always_on": True}, "would contradict it"),
        ({"idle_policy": "sleep", "sleep_level": 3}, "Sleep level 3 does not exist"),
        ({"idle_policy": "nap"}, "Unknown idle policy"),
        ({"idle_policy": "stop", "idle_minutes": 0}, "Idle minutes must be from 1"),
        ({"idle_minutes": "5"}, "idle_minutes: Input should be a whole number, not a string"),
        ({"always_on": 1}, "always_on: Input should be a valid boolean"),
    ],
)
def test_idle_settings_the_engine_cannot_have_are_a_400_saying_why(
    admin: Client, body: dict[str, object], why: str
) -> None:
    status, answer = create(admin, **body)
    assert status == 400 and why in str(answer["detail"]), answer
    assert not Deployment.objects.exists()


def test_the_cpu_engines_may_stop_when_idle(admin: Client) -> None:
    status, dep = create(admin, engine="vllm-cpu", max_model_len=2048, idle_policy="stop", idle_minutes=1)
    assert status == 201 and dep["idle_policy"] == "stop", dep


def test_a_change_of_the_idle_settings_alone_acts_at_once_without_a_recreate(admin: Client) -> None:
    _, dep = create(admin)
    Deployment.objects.filter(pk=dep["id"]).update(state=S.READY, desired=DesiredState.SERVING)
    url = f"/api/deployments/{dep['id']}/change"
    preview = admin.post(url, {"idle_policy": "stop", "idle_minutes": 10}, content_type=JSON).json()
    assert preview["recreate"] is False, preview
    assert admin.post(url, {"always_on": True, "idle_policy": "stop"}, content_type=JSON).status_code == 400
    resp = admin.post(url, {"idle_policy": "stop", "idle_minutes": 10, "confirm": True}, content_type=JSON)
    assert resp.status_code == 202 and resp.json()["state"] == "ready", resp.json()  # not stopping: no recreate
    row = Deployment.objects.get(pk=dep["id"])
    assert (row.idle_policy, row.idle_minutes) == ("stop", 10)
    [entry] = AuditEntry.objects.filter(action="deployment.idle_policy")
    assert entry.changes == {"idle_policy": ["stay", "stop"], "idle_minutes": [30, 10]}


def test_the_change_form_sets_the_idle_policy(admin: Client) -> None:
    _, dep = create(admin)
    form = {"max_model_len": 8192, "kv_space_gib": 1, "kv_cache_dtype": "auto", "gpu_memory_utilization": 0}
    form |= {"tensor_parallel_size": 0, "max_num_seqs": 256, "extra_args": ""}
    idle = {"idle_policy": "sleep", "idle_minutes": 7, "sleep_level": 1, "confirm": ""}
    resp = admin.post(f"/deployments/{dep['id']}/change/", form | idle)
    assert resp.status_code == 302, resp.content.decode()[-2000:]
    row = Deployment.objects.get(pk=dep["id"])
    assert (row.idle_policy, row.idle_minutes) == ("sleep", 7)


def test_sleep_and_wake_by_hand_are_refused_where_they_cannot_be(admin: Client, member: object) -> None:
    _, dep = create(admin, idle_policy="sleep")
    resp = admin.post(f"/api/deployments/{dep['id']}/sleep")
    assert resp.status_code == 400 and "is not launched yet; only a ready deployment" in resp.json()["detail"]
    Deployment.objects.filter(pk=dep["id"]).update(state=S.READY)
    replica = Replica.objects.create(deployment_id=dep["id"], runtime="process", host="h", port=1, running=True)
    assert "started without sleep mode" in admin.post(f"/api/deployments/{dep['id']}/sleep").json()["detail"]
    Deployment.objects.filter(pk=dep["id"]).update(always_on=True)  # no advice to set a policy it would refuse
    refused = admin.post(f"/api/deployments/{dep['id']}/sleep").json()["detail"]
    assert "cannot be put to sleep: An always-on deployment stays up" in refused and "launch it again" not in refused
    Deployment.objects.filter(pk=dep["id"]).update(always_on=False)
    Replica.objects.filter(pk=replica.pk).update(sleep_mode=True)
    Deployment.objects.filter(pk=dep["id"]).update(state=S.STOPPED)
    assert "only a ready deployment" in admin.post(f"/api/deployments/{dep['id']}/sleep").json()["detail"]
    assert "only one asleep or stopped to save" in admin.post(f"/api/deployments/{dep['id']}/wake").json()["detail"]
    member_client = Client()
    member_client.force_login(member)  # type: ignore[arg-type]
    assert member_client.post(f"/api/deployments/{dep['id']}/sleep").status_code == 403
    assert member_client.post(f"/deployments/{dep['id']}/wake/").status_code == 403


def test_a_ready_deployment_with_a_request_in_flight_stays_awake(admin: Client) -> None:
    import redis
    from django.conf import settings

    from console.deployments import activity

    _, dep = create(admin, idle_policy="sleep")
    Deployment.objects.filter(pk=dep["id"]).update(state=S.READY)
    Replica.objects.create(deployment_id=dep["id"], runtime="process", host="h", port=1, running=True, sleep_mode=True)
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.zadd(activity.in_flight_key(dep["id"]), {"req-1": 9e12})
    try:
        answer = admin.post(f"/api/deployments/{dep['id']}/sleep").json()
        assert "1 request in flight" in answer["detail"], answer
    finally:
        client.delete(activity.in_flight_key(dep["id"]))
    resp = admin.post(f"/api/deployments/{dep['id']}/sleep")
    assert resp.status_code == 202 and resp.json()["state"] == "sleeping" and resp.json()["desired"] == "asleep"
    assert resp.json()["state_reason"] == "Going to sleep."  # a trial read "Going to put."
    [entry] = AuditEntry.objects.filter(action="deployment.sleep")
    assert entry.actor_name == "admin" and entry.changes["level"] == 1


def test_the_transitions_of_a_sleep_and_a_wake() -> None:
    assert S.SLEEPING in TRANSITIONS[S.READY] and TRANSITIONS[S.SLEEPING] == (S.ASLEEP, S.READY, S.FAILED, S.STOPPING)
    assert TRANSITIONS[S.ASLEEP] == (S.WAKING, S.FAILED, S.STOPPING)
    assert TRANSITIONS[S.WAKING] == (S.READY, S.FAILED, S.STOPPING)
    ensure_model()
    model = ModelSource.objects.get(name="llama-8b")
    dep = admin_actions.create_deployment(name="t", model=model, engine="simulator", max_model_len=8192)
    Deployment.objects.filter(pk=dep.pk).update(state=S.READY, state_since=timezone.now() - timedelta(hours=1))
    dep.refresh_from_db()
    assert not dep.move(S.ASLEEP) and not dep.move(S.WAKING)  # only through sleeping
    assert dep.move(S.SLEEPING) and dep.move(S.ASLEEP) and dep.asleep_or_saving
    assert (timezone.now() - dep.state_since).total_seconds() < 5
    assert dep.move(S.WAKING, wake_started_at=timezone.now() - timedelta(seconds=2))
    assert dep.move(S.READY, "Serving.") and dep.wake_started_at is None and not dep.asleep_or_saving
    [woke] = DeploymentEvent.objects.filter(deployment=dep)
    assert woke.kind == "wake" and 2 <= (woke.seconds or 0) < 10
    assert dep.move(S.SLEEPING) and dep.move(S.ASLEEP)
    assert dep.move(S.WAKING, wake_started_at=timezone.now()) and dep.move(S.FAILED, "CUDA Error: out of memory")
    assert DeploymentEvent.objects.filter(kind="wake_failed", reason="CUDA Error: out of memory").exists()
    Deployment.objects.filter(pk=dep.pk).update(state=S.STOPPED, desired=DesiredState.STOPPED_IDLE)
    dep.refresh_from_db()
    assert dep.asleep_or_saving and dep.state_words == "stopped to save"


def test_a_policy_of_sleep_launches_the_engine_able_to_sleep(admin: Client) -> None:
    _, asleep = create(admin, name="s", idle_policy="sleep")
    _, plain = create(admin, name="p", idle_policy="stop")
    for dep_id, sleeps in ((asleep["id"], True), (plain["id"], False)):
        dep = Deployment.objects.get(pk=dep_id)
        replica = Replica(deployment=dep, runtime="process", host="127.0.0.1", port=9, engine_api_key="k")
        spec = launch_spec(dep, replica)
        assert ("--enable-sleep-mode" in spec.args) == sleeps and ("VLLM_SERVER_DEV_MODE" in spec.env) == sleeps
        assert spec.args[spec.args.index("--weights-bytes") + 1] == "16060522496"
    gpu = Deployment.objects.get(pk=asleep["id"])
    Deployment.objects.filter(pk=gpu.pk).update(engine="vllm")
    gpu.refresh_from_db()
    replica = Replica(deployment=gpu, runtime="docker", host="", port=8000, engine_api_key="k", runtime_name="r")
    with override_settings(HEARTH_RUNTIME="docker", HEARTH_ENGINE_IMAGES={"vllm": "vllm/vllm-openai:v0.11.0"}):
        spec = launch_spec(gpu, replica)
    assert "--enable-sleep-mode" in spec.args and spec.env["VLLM_SERVER_DEV_MODE"] == "1"
    with override_settings(HEARTH_RUNTIME="docker", HEARTH_ENGINE_IMAGES={"vllm": "vllm/vllm-openai:v0.7.3"}):
        spec = launch_spec(gpu, replica)  # too old to sleep: launched plain (its policy acts as a stop)
    assert "--enable-sleep-mode" not in spec.args and "VLLM_SERVER_DEV_MODE" not in spec.env
