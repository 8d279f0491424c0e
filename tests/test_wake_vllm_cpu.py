"""Issue 29's real-engine acceptance: a vLLM (CPU) deployment whose policy stops it after a minute idle is stopped by
Hearth; then the openai SDK sends a streaming and a non-streaming request, both answered after the relaunch with
keep-alives on the stream meanwhile and no error, and the request log shows the wake; the same again through the
anthropic SDK. The test run's settings (a keep-alive every HEARTH_SSE_KEEPALIVE, 1 s in pyproject.toml's test
environment; HEARTH_WAKE_TIMEOUT's default 300 s) and the SDKs' default timeouts. Measured here (2 shared cores):
the relaunch served the held requests after 44-49 s.

"Idle for a minute" is made true by moving the deployment's ``state_since`` (and its last request's time, in Redis)
an hour back, as tests/test_sleep_live.py does: reconcile then stops it within a few periods, and no test waits a
real minute. The SDKs are given an httpx client of their own only to record the stream's bytes as they came (the
keep-alives the SDKs skip), with the SDKs' own default timeout.
"""

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
import redis
from django.conf import settings
from django.utils import timezone

from console.deployments import activity
from console.deployments.models import Deployment
from console.observability.models import RequestLog
from tests.conftest import ENGINE_READY_WITHIN, Workers, login
from tests.test_e2e_vllm import MODEL_DIR, engine_built, wait_for
from tests.test_sleep_live import engine

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
__all__ = ["engine_built"]  # the module fixture that fails the tests when the engine is not built
READY_WITHIN = ENGINE_READY_WITHIN
STOPPED_WITHIN = 90  # seconds: a few reconcile periods, then the engine's stop
MESSAGES: list[Any] = [{"role": "user", "content": "Name three colours."}]


class Recording(httpx2.BaseTransport):
    """A transport (httpx2's, which both SDKs use) that keeps every piece of every answer's body, as it came."""

    def __init__(self) -> None:
        self.inner, self.pieces = httpx2.HTTPTransport(), []  # type: ignore[var-annotated]

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        answer = self.inner.handle_request(request)
        pieces, body = self.pieces, answer.stream
        assert isinstance(body, httpx2.SyncByteStream)

        class Tee(httpx2.SyncByteStream):
            def __iter__(self) -> Iterator[bytes]:
                for piece in body:
                    pieces.append(piece)
                    yield piece

            def close(self) -> None:
                body.close()

        return httpx2.Response(answer.status_code, headers=answer.headers, stream=Tee(), extensions=answer.extensions)


def stopped_to_save(client: httpx.Client, dep_id: int) -> None:
    """Idle for an hour as far as reconcile can tell (module docstring); returns once Hearth stopped it to save."""
    Deployment.objects.filter(pk=dep_id).update(state_since=timezone.now() - timedelta(hours=1))
    r = redis.Redis.from_url(settings.REDIS_URL)
    if r.exists(activity.last_request_key(dep_id)):
        r.set(activity.last_request_key(dep_id), repr(time.time() - 3600))
    dep = wait_for(client, dep_id, {"stopped", "failed"}, STOPPED_WITHIN)
    assert dep["state"] == "stopped" and dep["desired"] == "stopped_idle", dep
    assert not engine(dep_id).running


def both(stream: Any, whole: Any) -> tuple[Any, Any]:
    """``stream()`` and ``whole()`` sent at once, on threads; their results (an exception raised here)."""
    results: list[Any] = [None, None]

    def run(i: int, call: Any) -> None:
        try:
            results[i] = call()
        except Exception as exc:  # raised below, in the test's thread
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate((stream, whole))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(400)
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results[0], results[1]


def woken_rows(surface: str, count: int) -> list[RequestLog]:
    deadline = time.monotonic() + 15
    while len(rows := list(RequestLog.objects.filter(model="smol-saver", surface=surface))) < count:
        assert time.monotonic() < deadline, f"{len(rows)} of {count} rows"
        time.sleep(0.3)
    return rows


def held_with(rows: list[RequestLog], keepalives: int, surface: str, words: str) -> None:
    """Both requests served after the relaunch, logged as held for it; the stream kept alive while it lasted (a
    relaunch of vLLM (CPU) here takes longer than one HEARTH_SSE_KEEPALIVE)."""
    assert {(r.status, r.woke_engine, r.client_cancelled) for r in rows} == {(200, True, False)}, rows
    [stream] = [r for r in rows if r.stream]
    waited = stream.wake_seconds or 0
    print(f"{surface}: relaunched and served after {waited:.1f} s; {keepalives} {words} on the stream meanwhile")
    assert waited > settings.HEARTH_SSE_KEEPALIVE and keepalives >= int(waited / settings.HEARTH_SSE_KEEPALIVE) // 2
    assert (stream.ttft_seconds or 0) >= waited  # the TTFT its user felt


def test_a_vllm_cpu_deployment_stopped_to_save_is_launched_again_by_requests_through_both_sdks(
    web: str, worker: Workers, admin_user: object
) -> None:
    client = login(web)
    assert client.post("/api/models", json={"name": "smollm2-135m", "path": str(MODEL_DIR)}).status_code == 201
    fields = {"name": "smol-saver", "model": "smollm2-135m", "engine": "vllm-cpu", "max_model_len": 2048}
    resp = client.post("/api/deployments", json=fields | {"kv_space_gib": 1, "idle_policy": "stop", "idle_minutes": 1})
    assert resp.status_code == 201, resp.text
    dep_id = resp.json()["id"]
    assert client.post(f"/api/deployments/{dep_id}/launch").status_code == 202
    dep = wait_for(client, dep_id, {"ready", "failed"}, READY_WITHIN)
    assert dep["state"] == "ready", f"{dep}\n--- worker log ---\n{worker.output()[-4000:]}"
    key = client.post("/api/keys", json={"name": "saver"}).json()["key"]
    try:
        stopped_to_save(client, dep_id)
        recorded = Recording()
        gpt = openai.OpenAI(base_url=f"{web}/v1", api_key=key)  # the SDK's defaults: timeouts and retries
        gpt_recorded = openai.OpenAI(
            base_url=f"{web}/v1",
            api_key=key,
            http_client=httpx2.Client(transport=recorded, timeout=openai.DEFAULT_TIMEOUT),
        )

        def gpt_stream() -> str:
            chunks = gpt_recorded.chat.completions.create(
                model="smol-saver", messages=MESSAGES, max_tokens=16, stream=True
            )
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

        def gpt_whole() -> str | None:
            answer = gpt.chat.completions.create(model="smol-saver", messages=MESSAGES, max_tokens=16)
            return answer.choices[0].message.content

        streamed, whole = both(gpt_stream, gpt_whole)
        assert streamed and whole, (streamed, whole)
        raw = b"".join(recorded.pieces)
        held_with(woken_rows("openai", 2), raw[: raw.index(b"data:")].count(b"\n"), "openai", "blank lines")
        assert client.get(f"/api/deployments/{dep_id}").json()["events"][0]["kind"] == "wake"

        stopped_to_save(client, dep_id)
        recorded = Recording()
        claude = anthropic.Anthropic(base_url=web, api_key=key)
        claude_recorded = anthropic.Anthropic(
            base_url=web, api_key=key, http_client=httpx2.Client(transport=recorded, timeout=anthropic.DEFAULT_TIMEOUT)
        )

        def claude_stream() -> str:
            with claude_recorded.messages.stream(model="smol-saver", messages=MESSAGES, max_tokens=16) as stream:
                return "".join(stream.text_stream)

        def claude_whole() -> str:
            block = claude.messages.create(model="smol-saver", messages=MESSAGES, max_tokens=16).content[0]
            return block.text if block.type == "text" else ""

        streamed, whole = both(claude_stream, claude_whole)
        assert streamed and whole, (streamed, whole)
        raw = b"".join(recorded.pieces)
        pings = raw[: raw.index(b"event: message_start")].count(b"event: ping")
        held_with(woken_rows("anthropic", 2), pings, "anthropic", "pings")
        events = client.get(f"/api/deployments/{dep_id}").json()["events"]
        assert [e["kind"] for e in events[:2]] == ["wake", "stop_idle"]
    finally:
        client.post(f"/api/deployments/{dep_id}/stop")
        wait_for(client, dep_id, {"stopped", "failed"}, 60)
