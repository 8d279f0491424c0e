"""Room made by the numbers in the console and the API (issue 29; console.deployments.room_making, room_actions): on
the simulated 8× H100, two 70B deployments at TP 4 fill the box; a third is planned on the GPUs the least recently
used idle one frees, its launch waits for that room, and the words say what is put aside with the numbers. Never one
with a request in flight, never an always-on one, never one woken under HEARTH_MIN_RESIDENCY; a stay policy only with
the admin's consent. No process: the worker's side is tests/test_room_live.py."""

import time
from datetime import timedelta
from unittest import mock

import pytest
import redis
from django.conf import settings
from django.test import Client, override_settings
from django.utils import timezone

from console.audit.models import AuditEntry
from console.catalog.models import ModelSource
from console.deployments import activity, room_actions, wakeups
from console.deployments.models import Deployment, DeploymentState, DesiredState, Replica
from console.deployments.room_making import Asked, room_for
from engines.room import Verdict

pytestmark = pytest.mark.django_db
JSON = "application/json"
S = DeploymentState
HOUR = 3600.0


def create(admin: Client, name: str, **body: object) -> tuple[int, dict[str, object]]:
    if not ModelSource.objects.filter(name="llama-3.1-70b").exists():
        assert admin.post("/api/models", {"demo": "llama-3.1-70b"}, content_type=JSON).status_code == 201
    fields = {
        "name": name,
        "model": "llama-3.1-70b",
        "engine": "simulator",
        "max_model_len": 8192,
        "tensor_parallel_size": 4,
        "idle_policy": "sleep",
        "sleep_level": 2,
        "idle_minutes": 600,
    }
    resp = admin.post("/api/deployments", fields | body, content_type=JSON)
    return resp.status_code, resp.json()


def serving(dep_id: int, idle: float, awake: float = 10 * HOUR, sleep_mode: bool = True) -> None:
    """Make the deployment ready as the worker would, awake ``awake`` seconds, its last request ``idle`` ago."""
    now = timezone.now()
    Deployment.objects.filter(pk=dep_id).update(
        state=S.READY, desired=DesiredState.SERVING, state_since=now - timedelta(seconds=awake)
    )
    Replica.objects.create(
        deployment_id=dep_id, runtime="process", host="h", port=1, running=True, ready_at=now, sleep_mode=sleep_mode
    )
    activity.note_request(client(), dep_id, time.time() - idle)


def client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


def box_of_two(admin: Client, **a: object) -> tuple[int, int]:
    """a on GPUs 0–3, idle 3 h 12 min; b on GPUs 4–7, idle 1 min; both ready."""
    status, first = create(admin, "a", **a)
    assert status == 201, first
    serving(int(first["id"]), idle=3 * HOUR + 12 * 60)  # type: ignore[call-overload]
    status, second = create(admin, "b")
    assert status == 201, second
    assert second["plan"]["gpu_indices"] == [4, 5, 6, 7]  # type: ignore[index]
    serving(int(second["id"]), idle=60)  # type: ignore[call-overload]
    return int(first["id"]), int(second["id"])  # type: ignore[call-overload]


def test_a_third_70b_is_planned_where_the_least_recently_used_sleeps_and_its_launch_waits_for_that_room(
    admin: Client,
) -> None:
    a, _ = box_of_two(admin)
    status, third = create(admin, "c")
    assert status == 201, third
    words = (
        "To fit c (73.2 GiB per GPU on GPUs 0–3) put a to sleep at level 2 (idle 3 h 12 min, frees 71.8 GiB on "
        "GPUs 0–3)."
    )
    assert third["plan"]["reasons"][0] == f"At launch: {words}"  # type: ignore[index]
    assert third["plan"]["gpu_indices"] == [0, 1, 2, 3] and third["state"] == "stopped"  # type: ignore[index]
    [created] = AuditEntry.objects.filter(action="deployment.create", target_name="c")
    assert created.changes["room"] == words

    resp = admin.post(f"/api/deployments/{third['id']}/launch")
    assert resp.status_code == 202, resp.json()
    launched = resp.json()
    assert launched["state"] == "pending" and launched["state_reason"] == f"Waiting for room: {words}"
    [entry] = AuditEntry.objects.filter(action="deployment.launch", target_name="c")
    assert entry.changes["room"] == words and entry.changes["make_room"] is False
    assert Deployment.objects.get(pk=a).state == S.READY  # the worker puts it to sleep (launch_when_room)


def test_never_one_with_a_request_in_flight(admin: Client) -> None:
    a, _ = box_of_two(admin)
    client().zadd(activity.in_flight_key(a), {"req-1": time.time() + 600})
    status, third = create(admin, "c")
    assert status == 201, third
    assert "put b to sleep at level 2 (idle 1 min, frees 71.8 GiB on GPUs 4–7)" in third["plan"]["reasons"][0]  # type: ignore[index]


def test_never_an_always_on_one_and_none_left_is_a_400_saying_why(admin: Client) -> None:
    box_of_two(admin, idle_policy="stay", always_on=True)
    Deployment.objects.filter(name="b").update(state=S.LOADING)
    status, answer = create(admin, "c", make_room=True)
    assert status == 400
    assert "No room for c (73.2 GiB per GPU on 4 GPUs): a is always on; b is loading." in str(answer["detail"])
    assert not Deployment.objects.filter(name="c").exists()


def test_one_woken_under_the_residency_stays_awake(admin: Client) -> None:
    _, b = box_of_two(admin)
    Deployment.objects.filter(name="a").update(state_since=timezone.now() - timedelta(seconds=30))
    Deployment.objects.filter(pk=b).update(state_since=timezone.now() - timedelta(seconds=30))
    status, third = create(admin, "c")
    assert status == 201, third
    reason = third["plan"]["reasons"][0]  # type: ignore[index]
    assert settings.HEARTH_MIN_RESIDENCY == 120
    assert reason == (
        "At launch: c (73.2 GiB per GPU on 4 GPUs) waits for room: a came up 30 s ago (launched or woken) and stays "
        "up 1 min more; b came up 30 s ago (launched or woken) and stays up 1 min more."
    )


def test_a_stay_policy_is_put_aside_only_with_the_admin_s_consent(admin: Client) -> None:
    box_of_two(admin, idle_policy="stay")
    Deployment.objects.filter(name="b").update(always_on=True, idle_policy="stay")
    Replica.objects.filter(deployment__name="a").update(sleep_mode=False)  # a stay policy launches no sleep mode
    status, answer = create(admin, "c")
    assert status == 400
    detail = str(answer["detail"])
    assert "To fit c (73.2 GiB per GPU on GPUs 0–3) stop a (idle 3 h 12 min, frees 73.2 GiB on GPUs 0–3)." in detail
    assert "The idle policy of a is stay: only an admin's consent puts it aside." in detail
    assert detail.endswith("Create it with Make room (API: make_room) to put them aside and launch it.")
    status, third = create(admin, "c", make_room=True)
    assert status == 201, third
    row = Deployment.objects.get(name="c")
    assert row.state == S.PENDING and row.state_reason.startswith("Waiting for room: To fit c")
    [entry] = AuditEntry.objects.filter(action="deployment.launch", target_name="c")
    assert entry.changes["make_room"] is True


def test_an_asleep_deployment_holds_its_1_4_gib_a_gpu_in_the_plan(admin: Client) -> None:
    a, _ = box_of_two(admin)
    Deployment.objects.filter(pk=a).update(state=S.ASLEEP, desired=DesiredState.ASLEEP)
    status, third = create(admin, "c")
    assert status == 201, third
    assert third["plan"]["gpu_indices"] == [0, 1, 2, 3] and third["plan"]["fits"]  # type: ignore[index]
    reasons = third["plan"]["reasons"]  # type: ignore[index]
    assert "GPUs held by running deployments are left out: GPU 4 (b), GPU 5 (b), GPU 6 (b), GPU 7 (b)." in reasons
    asleep = "Asleep deployments still hold memory on a GPU, counted as used, and their GPUs are taken last: a 1.4 GiB"
    assert f"{asleep} on GPUs 0–3." in reasons
    assert any("Other processes already use 1.4 GiB of a GPU" in r for r in reasons)
    resp = admin.post(f"/api/deployments/{third['id']}/launch")
    assert resp.json()["state_reason"] == "Waiting for a worker."  # it fits: no room to make


def test_a_new_plan_takes_empty_gpus_before_an_asleep_deployments(admin: Client) -> None:
    """A trial's new 8B went on an asleep model's GPU while another stood empty: that model could not wake."""
    status, first = create(admin, "a")
    assert status == 201, first
    serving(int(first["id"]), idle=HOUR)  # type: ignore[call-overload]
    Deployment.objects.filter(name="a").update(state=S.ASLEEP, desired=DesiredState.ASLEEP)
    status, second = create(admin, "b")
    assert status == 201, second
    assert second["plan"]["gpu_indices"] == [4, 5, 6, 7] and second["plan"]["fits"]  # type: ignore[index]


def test_a_wake_in_place_needs_its_own_gpus_back(admin: Client) -> None:
    a, _ = box_of_two(admin)
    Deployment.objects.filter(pk=a).update(state=S.ASLEEP, desired=DesiredState.ASLEEP)
    status, third = create(admin, "c")
    assert status == 201, third
    serving(int(third["id"]), idle=5 * 60)  # type: ignore[call-overload]
    asleep = Deployment.objects.get(pk=a)
    room = room_for(Asked("a", asleep.stored_plan, in_place=True), exclude=a)
    assert room.verdict == Verdict.MAKE
    assert room.words() == (
        "To fit a (73.2 GiB per GPU on GPUs 0–3) put c to sleep at level 2 (idle 5 min, frees 71.8 GiB on GPUs 0–3)."
    )  # b, idle only 1 min, sleeps elsewhere: a wakes where it sleeps


def test_a_wake_waiting_for_room_says_so_and_one_that_found_none_says_why(admin: Client) -> None:
    """A trial's requests waited 96 s for a wake while the page said only "asleep"; a wake without room left the
    page's head as it was, its reason only in the history below."""
    a, _ = box_of_two(admin)
    Deployment.objects.filter(pk=a).update(state=S.ASLEEP, desired=DesiredState.ASLEEP, state_reason="Asleep.")
    status, third = create(admin, "c")
    assert status == 201, third
    serving(int(third["id"]), idle=5 * 60, awake=1.0)  # type: ignore[call-overload]  # under its residency
    seen: list[str] = []
    original = Deployment.progress

    def progress(self: Deployment, reason: str) -> bool:
        seen.append(reason)
        return original(self, reason)

    with override_settings(HEARTH_WAKE_TIMEOUT=0.2), mock.patch.object(Deployment, "progress", progress):
        room_actions.wake(a, "A request came for it.")
    waiting = "a (73.2 GiB per GPU on 4 GPUs) waits for room: c came up "
    assert seen[0].startswith(waiting) and seen[0].endswith(" ago (launched or woken) and stays up 1 min more."), seen
    asleep = Deployment.objects.get(pk=a)
    assert asleep.state == S.ASLEEP and asleep.state_reason.startswith(f"Not woken: No room within 0 s: {waiting}")


def test_a_wake_puts_aside_a_stay_policy_only_with_the_admins_consent(admin: Client) -> None:
    """A trial's Wake found no room where only a deployment on the stay policy stood in the way, and had no way to
    consent, as Launch has (make room)."""
    a, _ = box_of_two(admin)
    Deployment.objects.filter(pk=a).update(state=S.ASLEEP, desired=DesiredState.ASLEEP)
    status, third = create(admin, "c", idle_policy="stay")
    assert status == 201, third
    serving(int(third["id"]), idle=HOUR, sleep_mode=False)  # type: ignore[call-overload]
    with override_settings(HEARTH_WAKE_TIMEOUT=0.2):
        room_actions.wake(a, "Woken by an admin.")
        refused = Deployment.objects.get(pk=a).state_reason
        assert refused.startswith("Not woken: To fit a") and "only an admin's consent puts it aside" in refused
        assert refused.endswith(wakeups.ADMIN_MUST_ACT)  # the gateway tells clients not to retry
        assert Deployment.objects.get(name="c").state == S.READY
        room_actions.wake(a, "Woken by an admin.", consent=True)
    stopping = Deployment.objects.get(name="c")
    assert (stopping.state, stopping.desired) == (S.STOPPING, DesiredState.STOPPED_IDLE)
    answer = admin.post(f"/api/deployments/{a}/wake?make_room=true")
    assert answer.status_code == 202, answer.content
    [asked] = AuditEntry.objects.filter(action="deployment.wake", target_name="a", actor_name="admin")
    assert asked.changes["make_room"] is True


def test_put_aside_claims_each_sleep_and_audits_the_room_with_its_numbers(admin: Client) -> None:
    a, _ = box_of_two(admin)
    status, third = create(admin, "c")
    assert status == 201, third
    row = Deployment.objects.get(pk=third["id"])  # type: ignore[arg-type]
    room = room_for(Asked("c", row.stored_plan), exclude=row.pk)
    room_actions.put_aside(room, row)
    slept = Deployment.objects.get(pk=a)
    assert (slept.state, slept.desired) == (S.SLEEPING, DesiredState.ASLEEP)
    [made] = AuditEntry.objects.filter(action="deployment.make_room", target_name="c")
    assert made.changes["needs_gib_per_gpu"] == 73.2 and made.changes["gpus"] == [0, 1, 2, 3]
    [step] = made.changes["put_aside"]
    assert step == {
        "deployment": "a",
        "action": "sleep",
        "level": 2,
        "frees_gib_per_gpu": 71.8,
        "gpus": [0, 1, 2, 3],
        "idle_seconds": pytest.approx(3 * HOUR + 12 * 60, abs=5),
    }
    [sleep] = AuditEntry.objects.filter(action="deployment.sleep", target_name="a")
    assert sleep.changes["reason"] == made.changes["room"] and sleep.changes["level"] == 2
    assert room_actions.settling() == ["a"]  # no other decision until its sleep is done


def test_the_plan_api_plans_as_the_form_does_with_the_room_in_words(admin: Client) -> None:
    """A trial's /api/plan said "fits": false at tensor parallel 1 where the form showed the room it would make."""
    box_of_two(admin, idle_policy="stay")
    Deployment.objects.filter(name="b").update(always_on=True, idle_policy="stay")
    Replica.objects.filter(deployment__name="a").update(sleep_mode=False)  # a stay policy launches no sleep mode
    body = {"model": "llama-3.1-70b", "engine": "simulator", "max_model_len": 8192, "tensor_parallel_size": 4}
    asked = admin.post("/api/plan", body | {"name": "c"}, content_type=JSON).json()
    assert asked["fits"] and asked["gpu_indices"] == [0, 1, 2, 3], asked
    assert asked["room"].startswith("To fit c (73.2 GiB per GPU on GPUs 0–3) stop a (idle 3 h 12 min")
    assert asked["refused"].endswith("Create it with Make room (API: make_room) to put them aside and launch it.")
    consented = admin.post("/api/plan", body | {"make_room": True}, content_type=JSON).json()
    assert consented["refused"] is None and consented["room"].startswith("To fit llama-3.1-70b (73.2 GiB")


def test_the_form_shows_the_room_and_the_launch_button_offers_consent(admin: Client) -> None:
    box_of_two(admin)
    model = ModelSource.objects.get(name="llama-3.1-70b").pk
    form = {"name": "c", "model": model, "engine": "simulator", "max_model_len": 8192, "tensor_parallel_size": 4}
    plan = admin.post("/deployments/plan/", form).content.decode()
    assert 'data-field="room">To fit c (73.2 GiB per GPU on GPUs 0–3) put a to sleep at level 2' in plan
    assert "Fits." in plan
    status, third = create(admin, "c")
    assert status == 201, third
    Deployment.objects.filter(pk=third["id"]).update(state=S.FAILED)  # type: ignore[arg-type]
    page = admin.get(f"/deployments/{third['id']}/").content.decode()
    assert 'name="make_room"' in page


def test_a_new_deployment_on_gpus_a_sleeping_one_holds_says_its_wake_will_need_them(admin: Client) -> None:
    """A trial's new always-up deployment took the GPUs of one asleep, whose next wake then found no room: create
    said nothing of it."""
    _, b = box_of_two(admin)
    Deployment.objects.filter(pk=b).update(state=S.ASLEEP, desired=DesiredState.ASLEEP)
    status, third = create(admin, "c", idle_policy="stay")
    assert status == 201, third
    assert third["plan"]["gpu_indices"] == [4, 5, 6, 7]  # type: ignore[index]
    assert (
        "b is asleep on GPUs 4–7, which this plan takes: its wake needs them back and puts this deployment aside by "
        "its idle policy (one that stays up, only with an admin's consent)."
    ) in third["plan"]["reasons"]  # type: ignore[operator]
