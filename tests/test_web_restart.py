"""A restart of the web processes during open streams (what `make up` again, `make down` or compose recreating
`web` does: SIGTERM to appliance.web_server): every stream either completes or ends with an error event the
client sees, never a silent cut; the next process serves new requests."""

import asyncio
import json
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import Proc, free_port
from tests.simworld import Served

pytestmark = pytest.mark.django_db(transaction=True)
STREAMS = 64


def start(env: dict[str, str], port: int, log: Path) -> Proc:
    proc = Proc([sys.executable, "-m", "appliance.web_server", "--port", str(port)], env, log)
    for _ in range(150):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            assert proc.proc.poll() is None, proc.output()
        time.sleep(0.2)
    pytest.fail("the web server did not come up:\n" + proc.output())


def two_relays(live_env: dict[str, str], tmp_path: Path, drain_seconds: int) -> dict[str, str]:
    """The environment of a web server with two relay processes that drain for ``drain_seconds`` at a stop."""
    return {
        **live_env,
        "HEARTH_WEB_WORKERS": "2",
        "HEARTH_DRAIN_SECONDS": str(drain_seconds),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
    }


async def one_stream(base: str, key: str, opened: asyncio.Queue[None]) -> str:
    """How the stream ended: "done" ([DONE] after the answer), "error: <code>" (an error event), or "cut"."""
    body = {
        "model": "llama",
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "stream": True,
        "max_tokens": 600,
        "ignore_eos": True,
    }
    last = ""
    try:
        async with httpx.AsyncClient(timeout=120) as client:
            async with client.stream(
                "POST", f"{base}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
            ) as resp:
                assert resp.status_code == 200, await resp.aread()
                opened.put_nowait(None)
                async for line in resp.aiter_lines():
                    if line.startswith("data: "):
                        last = line[6:]
    except httpx.HTTPError:
        return "cut"
    if last == "[DONE]":
        return "done"
    error = json.loads(last).get("error") if last.startswith("{") else None
    return f"error: {error.get('code')}" if error else "cut"


def test_a_restart_during_64_open_streams_ends_each_completed_or_with_an_error_event(
    served: Served, live_env: dict[str, str], tmp_path: Path
) -> None:
    port, env = free_port(), two_relays(live_env, tmp_path, drain_seconds=2)
    base = f"http://127.0.0.1:{port}"
    web = start(env, port, tmp_path / "web.log")

    async def scenario() -> list[str]:
        opened: asyncio.Queue[None] = asyncio.Queue()
        streams = [asyncio.ensure_future(one_stream(base, served.key, opened)) for _ in range(STREAMS)]
        for _ in range(STREAMS):
            await asyncio.wait_for(opened.get(), 60)
        web.proc.send_signal(signal.SIGTERM)  # as scripts/down.sh and docker stop do
        return await asyncio.gather(*streams)

    try:
        endings = asyncio.run(scenario())
        assert web.proc.wait(30) == 0, web.output()[-3000:]
    finally:
        web.stop()
    assert "cut" not in endings, endings
    assert set(endings) <= {"done", "error: gateway_restarting"} and "error: gateway_restarting" in endings, endings
    web = start(env, port, tmp_path / "web.log")  # the next process serves at once
    try:
        answer = httpx.post(
            f"{base}/v1/chat/completions",
            headers={"Authorization": f"Bearer {served.key}"},
            json={"model": "llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
    finally:
        web.stop()


def test_a_request_sent_while_the_web_server_drains_is_refused_at_once_not_left_hanging(
    served: Served, live_env: dict[str, str], tmp_path: Path
) -> None:
    port, env = free_port(), two_relays(live_env, tmp_path, drain_seconds=30)
    base = f"http://127.0.0.1:{port}"
    web = start(env, port, tmp_path / "web.log")

    async def scenario() -> tuple[str, str]:
        opened: asyncio.Queue[None] = asyncio.Queue()
        stream = asyncio.ensure_future(one_stream(base, served.key, opened))
        await asyncio.wait_for(opened.get(), 60)
        web.proc.send_signal(signal.SIGTERM)  # the drain begins; the stream goes on meanwhile
        while True:  # the supervisor acts on the signal within its half-second round
            try:  # a new connection each time: a kept-alive one is closed by a relay as it stops
                async with httpx.AsyncClient(timeout=10, headers={"connection": "close"}) as client:
                    await client.get(f"{base}/health")
            except httpx.ConnectError:
                late = "refused"
                break
            except httpx.TimeoutException:  # taken by the kernel and never answered: what a client saw before
                late = "hung"
                break
            except httpx.RemoteProtocolError:  # accepted by a relay just before it closed its socket
                pass
            await asyncio.sleep(0.1)
        return late, await stream

    try:
        late, ending = asyncio.run(scenario())
        assert web.proc.wait(60) == 0, web.output()[-3000:]
    finally:
        web.stop()
    assert late == "refused"
    assert ending in {"done", "error: gateway_restarting"}, ending
