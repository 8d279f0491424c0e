"""Issue 29's acceptance, on the simulated 8× H100 through real processes (a web server and a worker of their own
instance, HEARTH_MIN_RESIDENCY 5 s): three 70B simulator deployments at TP 4, of which two fit, requests
alternating between them through the gateway. Each time one must make room, the least recently used idle deployment
on the GPUs it needs is put aside (asleep at level 2, or stopped to save for the one whose policy is stop), with the
numbers in its history and in the audit log; one with a request in flight is never touched, nor an always-on one.

The deployments: ``alpha`` and ``bravo`` sleep at level 2 (a level-1 copy of 131 GiB would not fit this host's RAM:
engines.room would stop them instead), their reload sped up to 200 GB/s by the simulator's own flag so a wake takes
about 1 s; ``charlie`` stops to save, so its wake is a launch on whichever GPUs the room frees. A wake in place
(alpha's, bravo's) can only free its own GPUs; charlie's launch is where the least-recently-used choice shows.
"""

import secrets
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings
from django.test import override_settings

from console.audit.models import AuditEntry
from console.deployments import activity
from tests.conftest import _stop_engines_left_running, login, start_web, start_worker
from tests.simworld import wait_state

pytestmark = pytest.mark.django_db(transaction=True)
RESIDENCY = 5  # seconds: HEARTH_MIN_RESIDENCY of this module's processes
INSTANCE = f"room-{secrets.token_hex(4)}"
FAST_RELOAD = ["--sleep-disk-gb-per-s", "200"]


@pytest.fixture(scope="module")
def box(live_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A web server and a worker of their own instance (their own queues: no other worker takes their tasks)."""
    env = {**live_env, "HEARTH_INSTANCE": INSTANCE, "HEARTH_MIN_RESIDENCY": str(RESIDENCY)}
    folder = tmp_path_factory.mktemp("room")
    web, base = start_web(env, folder / "web.log")
    worker = start_worker({**env, "HEARTH_GATEWAY_URL": base}, folder)
    yield base
    worker.stop()
    web.stop()
    with override_settings(HEARTH_INSTANCE=INSTANCE):
        _stop_engines_left_running()


def launched(client: httpx.Client, name: str, **body: object) -> dict[str, Any]:
    fields = {
        "name": name,
        "model": "llama-3.1-70b",
        "engine": "simulator",
        "max_model_len": 8192,
        "tensor_parallel_size": 4,
        "idle_policy": "sleep",
        "sleep_level": 2,
        "idle_minutes": 600,
        "extra_args": FAST_RELOAD,
    }
    resp = client.post("/api/deployments", json=fields | body)
    assert resp.status_code == 201, resp.text
    dep = resp.json()
    assert client.post(f"/api/deployments/{dep['id']}/launch").status_code == 202
    return dep


def ask(base: str, key: str, model: str) -> None:
    """One chat request through the gateway, answered (held while its deployment wakes)."""
    resp = httpx.post(
        f"{base}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=240,
    )
    assert resp.status_code == 200, resp.text


def state(client: httpx.Client, dep: dict[str, Any]) -> dict[str, Any]:
    return client.get(f"/api/deployments/{dep['id']}").json()  # type: ignore[no-any-return]


def put_aside_for(needing: str) -> list[str]:
    """The deployments each room made for ``needing`` put aside, oldest room first (its deployment.make_room
    entries)."""
    rooms = AuditEntry.objects.filter(action="deployment.make_room", target_name=needing).order_by("at", "pk")
    return [s["deployment"] for r in rooms for s in r.changes["put_aside"]]


def awake_for(client: httpx.Client, deps: list[dict[str, Any]], seconds: float) -> None:
    """Wait until each deployment has been ready ``seconds`` (its residency), as the API says."""
    deadline = time.monotonic() + seconds + 30
    for dep in deps:
        while True:
            found = state(client, dep)
            since = datetime.fromisoformat(found["state_since"])
            if found["state"] == "ready" and (datetime.now(since.tzinfo) - since).total_seconds() >= seconds:
                break
            assert time.monotonic() < deadline, found
            time.sleep(0.5)


def every_room() -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action="deployment.make_room").order_by("at", "pk"))


def in_flight(dep: dict[str, Any], count: int) -> None:
    """``count`` requests in flight for the deployment, as the gateway notes them (console.deployments.activity)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    with override_settings(HEARTH_INSTANCE=INSTANCE):
        key = activity.in_flight_key(dep["id"])
    client.delete(key)
    if count:
        client.zadd(key, {f"held-{n}": time.time() + 600 for n in range(count)})


def test_three_70b_on_eight_h100_take_turns_least_recently_used_first(box: str, admin_user: object) -> None:
    client = login(box)
    assert client.post("/api/models", json={"demo": "llama-3.1-70b"}).status_code == 201
    key = client.post("/api/keys", json={"name": "turns"}).json()["key"]
    alpha = launched(client, "alpha")
    assert wait_state(client, alpha["id"], {"ready", "failed"}, within=120)["state"] == "ready"
    bravo = launched(client, "bravo")
    assert wait_state(client, bravo["id"], {"ready", "failed"}, within=120)["state"] == "ready"
    ask(box, key, "alpha")
    ask(box, key, "bravo")  # alpha is now the least recently used
    awake_for(client, [alpha, bravo], RESIDENCY)

    # charlie does not fit: alpha is put to sleep for it, the numbers in its plan, its history and the audit log
    created = client.post(
        "/api/deployments",
        json={
            "name": "charlie",
            "model": "llama-3.1-70b",
            "engine": "simulator",
            "max_model_len": 8192,
            "tensor_parallel_size": 4,
            "idle_policy": "stop",
            "idle_minutes": 600,
        },
    )
    assert created.status_code == 201, created.text
    charlie = created.json()
    words = charlie["plan"]["reasons"][0]
    assert words.startswith("At launch: To fit charlie (73.2 GiB per GPU on GPUs 0–3) put alpha to sleep at level 2")
    assert "frees 71.8 GiB on GPUs 0–3)." in words
    assert client.post(f"/api/deployments/{charlie['id']}/launch").status_code == 202
    ready = wait_state(client, charlie["id"], {"ready", "failed"}, within=180)
    assert ready["state"] == "ready" and ready["plan"]["gpu_indices"] == [0, 1, 2, 3], ready
    slept = state(client, alpha)
    assert slept["state"] == "asleep" and slept["events"][0]["kind"] == "sleep", slept
    assert slept["events"][0]["reason"].startswith("To fit charlie (73.2 GiB per GPU on GPUs 0–3) put alpha to sleep")
    [made] = every_room()
    assert made.target_name == "charlie" and made.actor_name == "system"
    assert made.changes["needs_gib_per_gpu"] == 73.2 and made.changes["gpus"] == [0, 1, 2, 3]
    assert made.changes["put_aside"][0] | {"idle_seconds": 0} == {
        "deployment": "alpha",
        "action": "sleep",
        "level": 2,
        "frees_gib_per_gpu": 71.8,
        "gpus": [0, 1, 2, 3],
        "idle_seconds": 0,
    }
    [sleep] = AuditEntry.objects.filter(action="deployment.sleep", target_name="alpha")
    assert sleep.changes["reason"] == made.changes["room"]

    # alpha is asked for: it wakes where it sleeps, so charlie (on GPUs 0–3) is stopped to save for it, once
    # charlie has been awake HEARTH_MIN_RESIDENCY
    ask(box, key, "alpha")
    assert state(client, alpha)["state"] == "ready"
    stopped = state(client, charlie)
    assert (stopped["state"], stopped["desired"]) == ("stopped", "stopped_idle"), stopped
    assert stopped["events"][0]["kind"] == "stop_idle" and "To fit alpha" in stopped["events"][0]["reason"]
    assert put_aside_for("alpha") == ["charlie"]
    waited = (every_room()[-1].at - datetime.fromisoformat(ready["state_since"])).total_seconds()
    assert waited >= RESIDENCY

    # charlie is asked for: its launch may go anywhere, and bravo is the least recently used
    ask(box, key, "charlie")
    assert state(client, bravo)["state"] == "asleep" and state(client, alpha)["state"] == "ready"
    assert state(client, charlie)["plan"]["gpu_indices"] == [4, 5, 6, 7]
    assert put_aside_for("charlie") == ["alpha", "bravo"]

    # bravo is asked for: charlie (on its GPUs) is stopped; then charlie: alpha, least recently used, sleeps
    ask(box, key, "bravo")
    assert state(client, charlie)["state"] == "stopped" and state(client, bravo)["state"] == "ready"
    ask(box, key, "charlie")
    assert state(client, alpha)["state"] == "asleep" and state(client, bravo)["state"] == "ready"
    assert put_aside_for("charlie") == ["alpha", "bravo", "alpha"]

    # bravo is the least recently used but has a request in flight: alpha is put to sleep for charlie instead
    ask(box, key, "alpha")  # charlie (on GPUs 0–3) is stopped for alpha
    assert state(client, charlie)["state"] == "stopped"
    in_flight(bravo, 1)
    ask(box, key, "charlie")
    assert state(client, bravo)["state"] == "ready" and state(client, alpha)["state"] == "asleep"
    assert put_aside_for("charlie")[-1] == "alpha"
    in_flight(bravo, 0)

    # bravo always on and the least recently used again: never put aside
    change = client.post(
        f"/api/deployments/{bravo['id']}/change", json={"always_on": True, "idle_policy": "stay", "confirm": True}
    )
    assert change.status_code == 202, change.text
    ask(box, key, "alpha")  # charlie stopped for alpha
    ask(box, key, "charlie")
    assert state(client, bravo)["state"] == "ready" and state(client, alpha)["state"] == "asleep"
    assert put_aside_for("charlie")[-1] == "alpha"
    assert all("bravo" not in r.changes["room"] for r in every_room()[-2:])

    page = client.get("/").text
    assert 'data-deployment="alpha"' in page and "asleep (level 2)" in page
    for dep in (alpha, bravo, charlie):
        client.post(f"/api/deployments/{dep['id']}/stop")
