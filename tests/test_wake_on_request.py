"""Requests for a deployment put aside to share the GPUs wake it, through the real web server and worker on the
simulator (issue 29's acceptance): fifty at once wake it once and are all answered; a stream held meanwhile gets
keep-alives, then its answer; a wake that fails answers every held request 503 with the engine's reason (an
in-stream error to the held streams) and leaves no engine running; the openai and anthropic SDKs, as they come,
through a wake; a deployment stopped to save is launched again by a request and serves it.

The gateway here is a web server of this module's own with HEARTH_SSE_KEEPALIVE at 0.5 s, so a wake of a few
seconds shows keep-alives; the simulator's weights copy back at 4 GB/s (``--sleep-host-gb-per-s 4``: a level-1
wake of its 16 GB takes 4 s) where a test needs the wait to last.
"""

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from appliance.runtimes import get_runtime
from console.audit.models import AuditEntry
from console.deployments.models import DeploymentEvent
from console.observability.models import RequestLog
from tests.conftest import Workers, login, start_web
from tests.simworld import hearth_metrics, wait_state
from tests.test_sleep_live import RECONCILED, engine, idle_for_an_hour, launched

pytestmark = pytest.mark.django_db(transaction=True)
SLOWER = ["--sleep-host-gb-per-s", "4"]
RETRY_AFTER = str(max(1, int(settings.HEARTH_RECONCILE_INTERVAL)))  # a held request's, as a relay's
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


@pytest.fixture(scope="module")
def gateway(live_env: dict[str, str], worker: Workers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A web server of its own whose streams get a keep-alive every half second; its base URL."""
    folder: Path = tmp_path_factory.mktemp("wake-web")
    proc, base = start_web({**live_env, "HEARTH_SSE_KEEPALIVE": "0.5"}, folder / "web.log")
    yield base
    proc.stop()


def put_to_sleep(
    client: httpx.Client, name: str, extra_args: list[str] | None = None, **limits: int
) -> tuple[int, str]:
    """A simulator deployment ``name`` launched with policy sleep and put to sleep now; its id and a key (with
    ``limits``)."""
    dep = launched(client, name, idle_policy="sleep", sleep_level=1, extra_args=extra_args or [])
    assert client.post(f"/api/deployments/{dep['id']}/sleep").status_code == 202
    assert wait_state(client, dep["id"], {"asleep", "failed"})["state"] == "asleep"
    return dep["id"], client.post("/api/keys", json={"name": name, **limits}).json()["key"]


def stop(client: httpx.Client, dep_id: int) -> None:
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped", "failed"})


def wake_tasks(worker: Workers) -> int:
    """Wake tasks the session's worker has received so far."""
    return len(re.findall(r"console\.deployments\.tasks\.wake_deployment\[[0-9a-f-]+\] received", worker.output()))


def rows(model: str, count: int) -> list[RequestLog]:
    """The model's request log once it holds ``count`` rows (written after the answers)."""
    deadline = time.monotonic() + 15
    while len(found := list(RequestLog.objects.filter(model=model).order_by("id"))) < count:
        assert time.monotonic() < deadline, f"{len(found)} of {count} rows"
        time.sleep(0.2)
    return found


def counted(base: str, name: str, labels: dict[str, str]) -> float:
    for family in text_string_to_metric_families(hearth_metrics(base)):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "anthropic-version": "2023-06-01"}


class Streamed:
    """One streamed request read raw: its status, its bytes, and the lines before its first event."""

    def __init__(self, base: str, key: str, path: str, body: dict[str, Any]) -> None:
        self.status, self.raw = 0, b""
        with httpx.stream("POST", base + path, headers=headers(key), json=body, timeout=120) as resp:
            self.status = resp.status_code
            for piece in resp.iter_raw():
                self.raw += piece

    def before(self, event: bytes) -> bytes:
        """What came before ``event`` (b"data:" for an OpenAI stream's first, b"event: message_start")."""
        return self.raw[: self.raw.index(event)]


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run ``calls`` on threads at once; their results, in order (an exception is raised here)."""
    results: list[Any] = [None] * len(calls)

    def run(i: int, call: Callable[[], Any]) -> None:
        try:
            results[i] = call()
        except Exception as exc:  # raised below, in the test's thread
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results


async def burst(base: str, key: str, model: str, count: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=count)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as client:
        body = {"model": model, **CHAT}
        return list(
            await asyncio.gather(
                *(client.post("/v1/chat/completions", headers=headers(key), json=body) for _ in range(count))
            )
        )


def test_fifty_requests_to_a_sleeping_deployment_wake_it_once_and_are_all_answered(
    gateway: str, worker: Workers, admin_user: object
) -> None:
    client = login(gateway)
    dep_id, key = put_to_sleep(client, "crowd")
    tasks = wake_tasks(worker)
    answers = asyncio.run(burst(gateway, key, "crowd", 50))
    assert [a.status_code for a in answers] == [200] * 50, [a.text for a in answers if a.status_code != 200][:3]
    assert all(a.json()["choices"][0]["message"]["content"] for a in answers)
    assert all(float(a.headers["x-hearth-wake-seconds"]) > 1.0 for a in answers)  # told why the 200 came late
    assert client.get(f"/api/deployments/{dep_id}").json()["state"] == "ready"
    assert DeploymentEvent.objects.filter(deployment_id=dep_id, kind="wake").count() == 1
    assert AuditEntry.objects.filter(action="deployment.wake", target_id=str(dep_id)).count() == 1
    assert wake_tasks(worker) - tasks == 1  # one wake task, for fifty requests
    logged = rows("crowd", 50)
    assert all(r.status == 200 and r.woke_engine and (r.wake_seconds or 0) > 1.0 for r in logged)  # 16 GB copied
    assert counted(gateway, "hearth_gateway_held_requests_total", {"model": "crowd", "outcome": "served"}) == 50
    assert counted(gateway, "hearth_gateway_wakes_asked_total", {"model": "crowd"}) == 1
    answer = httpx.post(
        gateway + "/v1/chat/completions", headers=headers(key), json={"model": "crowd", **CHAT}, timeout=30
    )
    assert answer.status_code == 200 and rows("crowd", 51)[-1].woke_engine is False  # awake now: not held
    assert "x-hearth-wake-seconds" not in answer.headers
    stop(client, dep_id)


def test_streams_held_during_a_wake_get_keep_alives_then_their_answers(
    gateway: str, worker: Workers, admin_user: object
) -> None:
    client = login(gateway)
    dep_id, key = put_to_sleep(client, "streamer", SLOWER)
    chat, claude = at_once(
        lambda: Streamed(gateway, key, "/v1/chat/completions", {"model": "streamer", "stream": True, **CHAT}),
        lambda: Streamed(gateway, key, "/v1/messages", {"model": "streamer", "stream": True, **CHAT}),
    )
    assert chat.status == 200 and chat.raw.rstrip().endswith(b"data: [DONE]"), chat.raw[-300:]
    assert chat.before(b"data:").count(b"\n") >= 4 and chat.before(b"data:").strip() == b""  # keep-alives
    assert b'"error"' not in chat.raw
    assert claude.status == 200 and b"event: message_stop" in claude.raw, claude.raw[-300:]
    assert claude.before(b"event: message_start").count(b"event: ping") >= 4  # Anthropic's own keep-alive
    for row in rows("streamer", 2):
        assert row.status == 200 and row.woke_engine and not row.truncated
        assert (row.wake_seconds or 0) > 3.5 and (row.ttft_seconds or 0) >= (row.wake_seconds or 0)  # TTFT has it
    stop(client, dep_id)


def test_a_wake_that_fails_answers_every_held_request_503_with_the_engine_s_reason(
    gateway: str, worker: Workers, admin_user: object
) -> None:
    client = login(gateway)
    dep_id, key = put_to_sleep(client, "faulty-wake", [*SLOWER, "--fault-wake-fails"])
    responses = {"model": "faulty-wake", "input": "hi", "max_output_tokens": 8}
    bodies = {"/v1/chat/completions": {"model": "faulty-wake", **CHAT}, "/v1/responses": responses}

    def whole(path: str) -> httpx.Response:
        body = bodies.get(path, bodies["/v1/chat/completions"])
        return httpx.post(gateway + path, headers=headers(key), json=body, timeout=120)

    def streamed(path: str) -> Streamed:
        return Streamed(gateway, key, path, {**bodies.get(path, bodies["/v1/chat/completions"]), "stream": True})

    answers = at_once(
        *(lambda: whole("/v1/chat/completions") for _ in range(3)),
        lambda: whole("/v1/messages"),
        lambda: whole("/v1/responses"),
        lambda: streamed("/v1/chat/completions"),
        lambda: streamed("/v1/messages"),
        lambda: streamed("/v1/responses"),
    )
    reason = "Call to wake_up method failed: CUDA Error: out of memory"
    for answer in answers[:5]:  # failed: only an admin launches it again, so no SDK retries
        assert answer.status_code == 503 and "retry-after" not in answer.headers, answer.text
        assert answer.headers["x-should-retry"] == "false" and reason in answer.text
    assert [a.json()["error"]["code"] for a in answers[:3]] == ["wake_failed"] * 3
    assert answers[3].json()["error"]["type"] == "api_error"
    chat_stream, claude_stream, responses_stream = answers[5:]
    for held in answers[5:]:  # each got its head and keep-alives while the wake went on, then the error
        assert held.status == 200 and held.raw.startswith((b"\n\n", b"event: ping")), held.raw[:100]
        assert reason in held.raw.decode()
    assert json.loads(chat_stream.raw.strip().split(b"\n")[-1][6:])["error"]["code"] == "wake_failed"
    assert b"event: error" in claude_stream.raw and b"api_error" in claude_stream.raw
    assert b"event: response.failed" in responses_stream.raw
    failed = client.get(f"/api/deployments/{dep_id}").json()
    assert failed["state"] == "failed" and reason in failed["state_reason"]
    replica = engine(dep_id)  # nothing left half-awake
    assert replica.stopped_at is not None and not replica.running
    assert not get_runtime(replica.runtime).status(replica.runtime_name).running
    assert {(r.status, r.woke_engine) for r in rows("faulty-wake", 8)} == {(503, True)}
    assert counted(gateway, "hearth_gateway_held_requests_total", {"model": "faulty-wake", "outcome": "failed"}) == 8


def test_the_openai_and_anthropic_sdks_as_they_come_are_answered_through_a_wake(
    gateway: str, worker: Workers, admin_user: object
) -> None:
    client = login(gateway)
    dep_id, key = put_to_sleep(client, "sdk-napper", SLOWER, requests_per_minute=1000)
    gpt = openai.OpenAI(base_url=f"{gateway}/v1", api_key=key)  # default timeouts and retries
    claude = anthropic.Anthropic(base_url=gateway, api_key=key)
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    heads: list[httpx.Headers] = []

    def gpt_whole() -> str | None:
        raw = gpt.chat.completions.with_raw_response.create(model="sdk-napper", messages=messages, max_tokens=8)
        heads.append(raw.headers)
        return raw.parse().choices[0].message.content

    def gpt_stream() -> str:
        chunks = gpt.chat.completions.create(model="sdk-napper", messages=messages, max_tokens=8, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    def claude_stream() -> str:
        with claude.messages.stream(model="sdk-napper", messages=messages, max_tokens=8) as stream:
            return "".join(stream.text_stream)

    texts = at_once(
        gpt_whole,
        gpt_stream,
        lambda: claude.messages.create(model="sdk-napper", messages=messages, max_tokens=8).content[0].text,  # type: ignore[union-attr]
        claude_stream,
    )
    assert all(isinstance(t, str) and t for t in texts), texts
    assert heads[0]["x-ratelimit-limit-requests"] == "1000"  # the key's limits left, kept when planned again
    assert {(r.status, r.woke_engine) for r in rows("sdk-napper", 4)} == {(200, True)}  # none retried
    assert DeploymentEvent.objects.filter(deployment_id=dep_id, kind="wake").count() == 1
    stop(client, dep_id)


def test_a_deployment_stopped_to_save_is_launched_again_by_a_request_and_serves_it(
    gateway: str, worker: Workers, admin_user: object
) -> None:
    client = login(gateway)
    dep = launched(client, "saver-woken", idle_policy="stop", idle_minutes=1)
    first = engine(dep["id"])
    idle_for_an_hour(dep["id"])
    stopped = wait_state(client, dep["id"], {"stopped", "failed"}, within=RECONCILED)
    assert stopped["state"] == "stopped" and stopped["desired"] == "stopped_idle", stopped
    key = client.post("/api/keys", json={"name": "saver"}).json()["key"]
    listed = httpx.get(f"{gateway}/v1/models", headers=headers(key), timeout=10).json()
    assert "saver-woken" in [m["id"] for m in listed["data"]]  # put aside, still offered
    streamed, whole = at_once(
        lambda: Streamed(gateway, key, "/v1/chat/completions", {"model": "saver-woken", "stream": True, **CHAT}),
        lambda: httpx.post(
            gateway + "/v1/chat/completions", headers=headers(key), json={"model": "saver-woken", **CHAT}, timeout=120
        ),
    )
    assert streamed.status == 200 and streamed.raw.rstrip().endswith(b"data: [DONE]"), streamed.raw[-300:]
    assert whole.status_code == 200, whole.text
    ready = client.get(f"/api/deployments/{dep['id']}").json()
    assert ready["state"] == "ready" and ready["events"][0]["kind"] == "wake"
    assert engine(dep["id"]).pk != first.pk  # launched again
    assert {(r.status, r.woke_engine) for r in rows("saver-woken", 2)} == {(200, True)}
    stop(client, dep["id"])
