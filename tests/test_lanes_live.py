"""Priority lanes end to end: Hearth's web server in front of the simulator run with one sequence at a time
(``--max-num-seqs 1``, a slow decode, so a long stream holds the engine) and its priority policy, keys of the three
classes, real HTTP streams that a test opens and drops. What the gateway holds is read where the console reads it
(console.observability.queue_depth) and in its /metrics; what the engine runs in the engine's own /metrics."""

import asyncio
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from console.access.keys import create_key
from console.observability.queue_depth import queue_depth
from gateway.engine_load import parse_load
from tests.conftest import start_web
from tests.outside import OutsideSim, ready_deployment
from tests.simworld import hearth_metrics

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

PRIORITY = ["--scheduling-policy", "priority"]
ENGINE = ["--max-num-seqs", "1", "--decode-ms-per-token", "100", "--natural-output-tokens", "5000", *PRIORITY]
LONG, SHORT = 3000, 3  # max_tokens: a stream that holds the engine until dropped, and one done in a few steps
BOUND = 30.0  # seconds any awaited state may take before the test fails


@dataclass
class World:
    base: str
    deployment: int
    engine: OutsideSim
    keys: dict[str, str]
    events: list[tuple[str, str]] = field(default_factory=list)  # (what, stream name), in the order they came

    def engine_requests(self) -> int:
        load = parse_load(httpx.get(self.engine.base + "/metrics", timeout=10).text)
        assert load is not None
        return load.running + load.waiting

    def held(self) -> dict[str, int]:
        return queue_depth([self.deployment]).get(self.deployment, {})

    def stream(self, client: httpx.AsyncClient, name: str, key: str, tokens: int) -> "asyncio.Task[int]":
        """A streamed chat as ``name``, noting its first content and its end in ``events``; its status."""

        async def run() -> int:
            body = {"model": "lane", "messages": [{"role": "user", "content": name}], "stream": True}
            headers = {"Authorization": f"Bearer {self.keys[key]}"}
            async with client.stream(
                "POST", "/v1/chat/completions", json=body | {"max_tokens": tokens}, headers=headers
            ) as resp:
                async for line in resp.aiter_lines():
                    if '"content":"' in line.replace(" ", "") and ("first", name) not in self.events:
                        self.events.append(("first", name))
                self.events.append(("done", name))
                return resp.status_code

        return asyncio.ensure_future(run())


@pytest.fixture
def world(
    live_env: dict[str, str], tmp_path: Path, admin_user: object, request: pytest.FixtureRequest
) -> Iterator[World]:
    engine = OutsideSim(tmp_path / "engine.log", "lane", *ENGINE, api_key="")
    assert engine.proc is not None
    try:
        with ready_deployment(
            "lane", "simulator", engine.port, engine.proc.pid, secrets.token_hex(8), PRIORITY, 8192
        ) as dep:
            keys = {c: create_key(c, admin_user, priority=c)[1] for c in ("interactive", "standard", "batch")}
            overrides = {"HEARTH_LANES": "on", "HEARTH_LANE_HOLD_TIMEOUT": "3", **getattr(request, "param", {})}
            env = {**live_env, **overrides, "HEARTH_SSE_KEEPALIVE": "0.5"}
            web, base = start_web(env, tmp_path / "web.log")
            try:
                yield World(base, dep, engine, keys)
            finally:
                web.stop()
    finally:
        engine.stop()


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + BOUND
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"not within {BOUND:g} s: {what}"
        await asyncio.sleep(0.05)


def past(world: World, sent: int) -> bool:
    """Whether the engine has more requests than the ``sent`` it had."""
    return world.engine_requests() > sent


async def saturate(world: World, client: httpx.AsyncClient, prefix: str) -> list["asyncio.Task[int]"]:
    """Long standard streams, one at a time, each once the last reached the engine or was held, until one is
    held: the first runs, those after it wait in the engine, the last waits in the gateway."""
    streams: list[asyncio.Task[int]] = []
    for i in range(8):
        sent = world.engine_requests()
        streams.append(world.stream(client, f"{prefix}{i}", "standard", LONG))
        await until(lambda: past(world, sent) or world.held()["standard"] > 0, f"{prefix}{i} on")  # noqa: B023
        if world.held()["standard"]:
            return streams
    raise AssertionError("nothing was held")


async def drop(*tasks: "asyncio.Task[int]") -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def holds(base: str, outcome: str) -> float:
    prefix = 'hearth_gateway_lane_holds_total{model="lane",'
    lines = [ln for ln in hearth_metrics(base).splitlines() if ln.startswith(prefix) and f'outcome="{outcome}"' in ln]
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines)


@pytest.mark.parametrize("world", [{"HEARTH_LANE_HOLD_TIMEOUT": "120"}], indirect=True)
def test_held_while_saturated_interactive_first_released_as_the_engine_drains(world: World) -> None:
    """The held stream waits out the whole scenario: at the other tests' 3 s it timed out on a loaded CI machine
    before the engine drained (its in-stream 429 came before the interactive request's end)."""

    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=world.base, timeout=120) as client:
            streams = await saturate(world, client, "s")
            running, in_engine, held = streams[0], streams[1:-1], streams[-1]
            assert world.held() == {"interactive": 0, "standard": 1, "batch": 0}
            sent = world.engine_requests()
            urgent = world.stream(client, "urgent", "interactive", SHORT)
            await until(lambda: world.engine_requests() > sent, "the interactive request in the engine")
            assert world.held()["interactive"] == 0  # never held, however saturated
            await drop(running)  # the engine's one slot frees: its queue runs lower priority values first
            assert await asyncio.wait_for(urgent, BOUND) == 200
            assert ("first", "s1") not in world.events[: world.events.index(("done", "urgent"))]
            assert ("first", f"s{len(streams) - 1}") not in world.events  # the held stream: nothing yet
            await drop(*in_engine)  # drained: the held stream goes on
            await until(lambda: ("first", f"s{len(streams) - 1}") in world.events, "the held stream released")
            # a release at a request's end is published with the next reading (READ_EVERY): the console's view lags
            await until(lambda: world.held()["standard"] == 0, "the release published")
            await drop(held)

    asyncio.run(scenario())
    assert holds(world.base, "served") >= 1


def test_a_hold_too_long_is_a_429_with_retry_after_or_an_error_event_and_a_client_that_left_leaves(
    world: World,
) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=world.base, timeout=120) as client:
            streams = await saturate(world, client, "t")
            sdk = openai.AsyncOpenAI(base_url=world.base + "/v1", api_key=world.keys["standard"], max_retries=0)
            with pytest.raises(openai.RateLimitError) as limited:
                await sdk.chat.completions.create(
                    model="lane", messages=[{"role": "user", "content": "x"}], max_tokens=2
                )
            assert limited.value.response.headers["retry-after"] == "30"
            assert limited.value.code == "lane_hold_timeout"
            claude = anthropic.AsyncAnthropic(base_url=world.base, api_key=world.keys["batch"], max_retries=0)
            with pytest.raises(anthropic.RateLimitError) as refused:
                await claude.messages.create(model="lane", max_tokens=2, messages=[{"role": "user", "content": "x"}])
            assert refused.value.response.headers["retry-after"] == "30"
            assert refused.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
            stream = await sdk.chat.completions.create(
                model="lane", messages=[{"role": "user", "content": "x"}], max_tokens=2, stream=True
            )  # its head and keep-alives went out while it was held: the refusal comes as the stream's error event
            with pytest.raises(openai.APIError, match="stayed saturated"):
                async for _ in stream:
                    pass
            cancelled = holds(world.base, "cancelled")
            await until(lambda: world.held()["standard"] == 0, "the queue empty (each of the above timed out)")
            leaving = world.stream(client, "leaving", "standard", SHORT)
            await until(lambda: world.held()["standard"] >= 1, "the leaving stream held")
            await drop(leaving)
            await until(lambda: holds(world.base, "cancelled") > cancelled, "the client that left out of the queue")
            await until(lambda: world.held()["standard"] == 0, "the queue empty")
            await drop(*streams)

    asyncio.run(scenario())
    assert holds(world.base, "timeout") >= 3


@pytest.mark.parametrize("world", [{"HEARTH_LANES": "off"}], indirect=True)
def test_lanes_off_hold_nothing(world: World) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=world.base, timeout=120) as client:
            streams = []
            for i in range(4):
                sent = world.engine_requests()
                streams.append(world.stream(client, f"o{i}", "batch", LONG))
                await until(lambda: past(world, sent), f"o{i} in the engine")  # noqa: B023 (every one goes on)
            assert world.engine_requests() == 4 and world.held() == {"interactive": 0, "standard": 0, "batch": 0}
            await drop(*streams)

    asyncio.run(scenario())
    assert "hearth_gateway_lane_holds_total{" not in hearth_metrics(world.base)
