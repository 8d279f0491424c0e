"""Priority lanes without processes (gateway.lanes, gateway.fair_queue, gateway.engine_load): the fair order between
keys, a lane that holds standard and batch requests while its replicas' readings say saturated and releases them as
requests end, the engine's ``priority`` field, the readings of real engines' /metrics, the queue depth in Redis, and
the simulator's priority queue. The replicas' readings come from a stand-in reader (the live tests read a real
simulator); Redis is the run's."""

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from django.conf import settings
from django.test import override_settings

from console.deployments.engine_flags import schedules_by_priority
from console.observability.queue_depth import depth_key, queue_depth
from engines.simulator.config import parse_config
from engines.simulator.metrics import SimMetrics
from engines.simulator.scheduler import Engine
from gateway import lanes
from gateway.answers import for_request
from gateway.engine_load import READ_TIMEOUT, Load, LoadReader, parse_load
from gateway.errors import GatewayError, Surface
from gateway.fair_queue import FairQueue
from gateway.lanes import Lanes, Ticket, with_engine_priority
from gateway.relay import Relay
from gateway.relay_plan import RelayPlan
from gateway.relay_state import RelayState
from gateway.snapshot import KeyEntry, Route, Upstream
from gateway.sse import StreamKind
from gateway.upstream import Engines

DATA = Path(__file__).parent / "data"
DEP = 73
ROUTE = Route("lane", (Upstream(5, "http://127.0.0.1:9", "k"),), 8192, 0, deployment_id=DEP)


def plan(key: int, priority: str, route: Route = ROUTE, body: bytes = b'{"model": "lane"}', **more: Any) -> RelayPlan:
    request = {"model": "lane", "max_tokens": 100, **more}
    return RelayPlan(
        key=KeyEntry(key, f"hk-{key}", "", frozenset(), None, None, priority=priority),
        route=route,
        endpoint="/v1/chat/completions",
        surface=Surface.OPENAI,
        stream=False,
        arrived=time.monotonic(),
        engine_path="/v1/chat/completions",
        body=body,
        prefix=b"",
        kind=StreamKind.CHAT,
        request=request,
        keepalive_every=15.0,
        idle_timeout=600.0,
        retry_after=10,
        priority=priority,
    )


class Readings:
    """The replicas as a test sets them, in place of gateway.engine_load.LoadReader."""

    def __init__(self) -> None:
        self.load = Load(0, 0, 0.0)
        self.reads = 0

    async def read(self, upstreams: tuple[Upstream, ...]) -> dict[int, Load]:
        self.reads += 1
        return {5: self.load}

    async def close(self) -> None:
        pass


class Sent:
    async def __call__(self, message: Any) -> None:
        pass


def relay_of(p: RelayPlan) -> Relay:
    relay = Relay.__new__(Relay)
    relay.plan = p
    relay.state = RelayState(for_request(p.endpoint, p.request), quiet_since=time.monotonic())
    return relay


async def settled(readings: Readings, reads: int = 2) -> None:
    """Until the lane has read the replicas ``reads`` more times (its loop: read, release, publish, sleep)."""
    target = readings.reads + reads
    while readings.reads < target:
        await asyncio.sleep(0.01)


def run(test: Any) -> Any:
    return asyncio.run(asyncio.wait_for(test(), 30))


def test_one_keys_two_hundred_requests_do_not_starve_another_keys_one() -> None:
    queue: FairQueue[tuple[str, int]] = FairQueue()
    for i in range(200):
        queue.push("flood", 300, ("flood", i))
    queue.push("single", 300, ("single", 0))
    order = [queue.pop() for _ in range(201)]
    assert order.index(("single", 0)) <= 1 and queue.pop() is None and len(queue) == 0
    for i in range(60):  # tokens, not requests, are shared: a key of 100-token requests goes 3 times as often
        queue.push("long", 300, ("long", i))
        queue.push("short", 100, ("short", i))
    first = [queue.pop() for _ in range(40)]
    assert sum(1 for item in first if item and item[0] == "short") == 30


def test_an_entry_taken_out_is_never_handed_out() -> None:
    queue: FairQueue[str] = FairQueue()
    gone = queue.push("a", 10, "gone")
    queue.push("a", 10, "stays")
    queue.remove(gone)
    assert len(queue) == 1 and queue.pop() == "stays" and queue.pop() is None


@override_settings(HEARTH_LANES=True, HEARTH_LANE_HOLD_TIMEOUT=20.0)
def test_standard_and_batch_wait_while_saturated_interactive_never_and_they_go_as_requests_end() -> None:
    async def test() -> None:
        r = aioredis.Redis.from_url(settings.REDIS_URL)
        gate, readings = Lanes(r, Engines(1, 1)), Readings()
        gate.reader = readings  # type: ignore[assignment]
        first = gate.ticket(relay_of(plan(1, "standard")), Sent())
        await first.before()  # type: ignore[misc]
        assert first.admitted
        readings.load = Load(running=1, waiting=1, kv_usage=0.1)  # one waiting for the next engine step
        await settled(readings, 1)
        lane = gate._lanes[DEP]
        assert lane.reading is not None and lane.reading.capacity is None  # taught nothing
        readings.load = Load(running=32, waiting=2, kv_usage=0.5)  # a queue that lasts: 32 is its capacity
        await settled(readings)
        assert lane.saturated() and lane.reading is not None and lane.reading.capacity == 32
        held = ((2, "batch"), (3, "standard"), (3, "standard"))
        tickets = [gate.ticket(relay_of(plan(k, c)), Sent()) for k, c in held]
        waits = [asyncio.ensure_future(t.before()) for t in tickets]  # type: ignore[misc]
        await asyncio.sleep(0.05)
        assert not any(w.done() for w in waits) and lane.held == 3
        urgent = gate.ticket(relay_of(plan(4, "interactive")), Sent())
        await asyncio.wait_for(urgent.before(), 1)  # type: ignore[misc]
        assert urgent.admitted  # never held, however saturated
        readings.load = Load(running=30, waiting=0, kv_usage=0.5)  # drained to its capacity less 32 // 16: no room
        await settled(readings)
        assert lane.held == 3
        readings.load = Load(running=28, waiting=0, kv_usage=0.3)  # room for two: standard first
        await settled(readings, 1)
        assert [t.admitted for t in tickets] == [False, True, True] and lane.held == 1  # set as released
        readings.load = Load(running=30, waiting=0, kv_usage=0.4)  # the engine runs the two now
        await settled(readings, 1)
        assert lane.held == 1
        urgent.done()  # a request ending makes room at once, before the next reading
        await asyncio.wait_for(waits[0], 1)
        for t in tickets:
            t.done()
        assert tickets[0].admitted and lane.held == 0 and lane.in_flight == 1
        readings.load = Load(running=1, waiting=0, kv_usage=0.95)  # KV use over the threshold alone saturates
        await settled(readings)
        assert lane.saturated()
        first.done()
        while lane.watcher is not None:  # the last request ended: the lane stops reading
            await asyncio.sleep(0.01)
        await gate.close()
        await r.aclose()

    run(test)


@override_settings(HEARTH_LANES=True, HEARTH_LANE_HOLD_TIMEOUT=20.0)
def test_an_engine_launched_with_max_num_seqs_is_never_filled_past_it_less_one_kept_for_interactive() -> None:
    """A trial's burst of batch and standard requests on an engine of max_num_seqs 4: the gateway sent 11 before any
    reading had taught it a capacity, and interactive requests waited 20-44 s in the engine's queue behind them."""

    class Engine(Readings):
        """An engine of max_num_seqs 4 running what the lane sent on, its metrics a reading late: the first reading
        sees none of the first request (it has not reached the engine's metrics yet)."""

        async def read(self, upstreams: tuple[Upstream, ...]) -> dict[int, Load]:
            self.reads += 1
            sent = self.seen
            self.seen = gate._lanes[DEP].in_flight
            return {5: Load(running=min(sent, 4), waiting=max(sent - 4, 0), kv_usage=0.2)}

        seen = 0

    async def test() -> None:
        nonlocal gate
        r = aioredis.Redis.from_url(settings.REDIS_URL)
        gate = Lanes(r, Engines(1, 1))
        gate.reader = readings = Engine()  # type: ignore[assignment]
        four = Route("lane", ROUTE.upstreams, 8192, 0, deployment_id=DEP, max_num_seqs=4)
        burst = [(1, "batch")] * 4 + [(2, "standard")]
        tickets = [gate.ticket(relay_of(plan(k, c, four)), Sent()) for k, c in burst]
        waits = [asyncio.ensure_future(t.before()) for t in tickets]  # type: ignore[misc]
        await settled(readings, 3)
        lane = gate._lanes[DEP]
        assert lane.reading is not None and lane.reading.capacity == 4
        assert sum(t.admitted for t in tickets) == 3 and lane.held == 2  # 4 less the one kept for interactive
        assert tickets[-1].admitted  # the standard one before the batch ones still held
        urgent = gate.ticket(relay_of(plan(3, "interactive", four)), Sent())
        await asyncio.wait_for(urgent.before(), 1)  # type: ignore[misc]
        assert urgent.admitted  # straight into the engine's free place, not behind a queue
        await settled(readings)
        assert lane.held == 2  # the engine's four places taken
        first = tickets[0]
        for t in (first, urgent):
            t.done()  # two ended: one place for a batch request, one kept
        await settled(readings)
        assert lane.held == 1 and sum(t.admitted for t in tickets) == 4
        for t in tickets:
            if t.admitted and t is not first:
                t.done()
        await asyncio.gather(*waits)
        await gate.close()
        await r.aclose()

    gate: Lanes
    run(test)


def test_the_headroom_kept_for_interactive_requests() -> None:
    assert [lanes.headroom(c) for c in (0, 1, 2, 4, 16, 32, 256)] == [0, 0, 1, 1, 1, 2, 16]


@override_settings(HEARTH_LANES=True, HEARTH_LANE_HOLD_TIMEOUT=20.0)
def test_a_lane_releases_keys_fairly_not_in_arrival_order() -> None:
    async def test() -> list[int]:
        r = aioredis.Redis.from_url(settings.REDIS_URL)
        gate, readings = Lanes(r, Engines(1, 1)), Readings()
        gate.reader = readings  # type: ignore[assignment]
        running = [gate.ticket(relay_of(plan(1, "standard")), Sent())]
        await running[0].before()  # type: ignore[misc]
        readings.load = Load(running=1, waiting=1, kv_usage=0.2)  # saturated: room only as requests end
        await settled(readings)
        released: list[int] = []

        async def one(key: int) -> None:
            ticket = gate.ticket(relay_of(plan(key, "standard")), Sent())
            await ticket.before()  # type: ignore[misc]
            released.append(key)
            running.append(ticket)

        waits = [asyncio.ensure_future(one(7)) for _ in range(6)]  # one key's burst first,
        await asyncio.sleep(0.05)
        waits.append(asyncio.ensure_future(one(8)))  # then another key's single request
        await asyncio.sleep(0.05)
        assert gate._lanes[DEP].held == 7
        for count in range(1, 8):  # each request that ends makes room for the next held one
            running.pop(0).done()
            while len(released) < count:
                await asyncio.sleep(0.01)
        await asyncio.gather(*waits)
        running.pop(0).done()
        await gate.close()
        await r.aclose()
        return released

    order = run(test)
    assert sorted(order) == [7] * 6 + [8] and order.index(8) <= 1


@override_settings(HEARTH_LANES=True, HEARTH_LANE_HOLD_TIMEOUT=0.3)
def test_a_hold_past_its_timeout_is_a_429_with_retry_after_and_leaves_the_queue() -> None:
    async def test() -> GatewayError:
        r = aioredis.Redis.from_url(settings.REDIS_URL)
        gate, readings = Lanes(r, Engines(1, 1)), Readings()
        gate.reader = readings  # type: ignore[assignment]
        busy = gate.ticket(relay_of(plan(1, "standard")), Sent())
        await busy.before()  # type: ignore[misc]
        readings.load = Load(running=1, waiting=1, kv_usage=None)
        await settled(readings)
        late = gate.ticket(relay_of(plan(2, "batch")), Sent())
        try:
            with pytest.raises(GatewayError) as refused:
                await late.before()  # type: ignore[misc]
            assert gate._lanes[DEP].held == 0 and not late.admitted
            return refused.value
        finally:
            await gate.close()
            await r.aclose()

    error = run(test)
    assert error.status == 429 and error.retry_after == lanes.RETRY_AFTER and error.code == "lane_hold_timeout"
    assert json.loads(error.body(Surface.ANTHROPIC))["error"]["type"] == "rate_limit_error"
    assert json.loads(error.body())["error"]["type"] == "rate_limit_error"


@override_settings(HEARTH_LANES=False)
def test_lanes_off_hold_nothing_and_read_nothing() -> None:
    gate = Lanes(aioredis.Redis.from_url(settings.REDIS_URL), Engines(1, 1))
    ticket = gate.ticket(relay_of(plan(1, "batch")), Sent())
    assert ticket.lane is None and ticket.before is None


def test_the_class_goes_to_an_engine_that_schedules_by_priority_in_place_of_the_clients() -> None:
    ordered = Route("lane", ROUTE.upstreams, 8192, 0, deployment_id=DEP, priority_scheduling=True)
    sent = with_engine_priority(plan(1, "batch", ordered, b'{"model": "lane", "priority": -100}'))
    assert json.loads(sent.body)["priority"] == lanes.ENGINE_PRIORITY["batch"] == 20
    appended = with_engine_priority(plan(1, "interactive", ordered))
    assert appended.body == b'{"model": "lane","priority": 0}'
    assert with_engine_priority(plan(1, "batch")).body == b'{"model": "lane"}'  # an fcfs engine gets nothing
    native = plan(1, "batch", ordered)
    messages = RelayPlan(**{**{f: getattr(native, f) for f in native.__slots__}, "engine_path": "/v1/messages"})
    assert with_engine_priority(messages).body == native.body


def test_which_launch_flags_make_an_engine_schedule_by_priority() -> None:
    assert schedules_by_priority(["--scheduling-policy", "priority"], "simulator")
    assert schedules_by_priority(["--scheduling-policy=priority"], "vllm-cpu")
    assert not schedules_by_priority(["--scheduling-policy", "fcfs"], "vllm")
    assert not schedules_by_priority([], "vllm")
    assert schedules_by_priority(["--enable-priority-scheduling", "--schedule-low-priority-values-first"], "sglang")
    assert not schedules_by_priority(["--enable-priority-scheduling"], "sglang-cpu")  # higher first: not ours


def test_engine_load_reads_real_engines_and_the_simulator() -> None:
    assert parse_load((DATA / "vllm/vllm-0.32.0-cpu-metrics.txt").read_text()) == Load(0, 0, 0.0)
    sglang = parse_load((DATA / "sglang-0.5.15.post1-cpu-metrics-under-load.txt").read_text())
    assert sglang is not None and sglang.running == 4 and sglang.kv_usage == pytest.approx(0.01)
    sim = SimMetrics("vllm", "lane", {})
    sim.set_state(3, 7, 0.42, 100, 0.0)
    read = parse_load(sim.render().decode())
    assert read is not None and (read.running, read.waiting) == (3, 7) and read.kv_usage == pytest.approx(0.42)
    assert parse_load("# nothing here\n") is None


def test_the_reader_reads_each_launched_replica_over_http_and_skips_those_that_do_not_answer() -> None:
    """LoadReader over real HTTP (an asyncio server here): a replica's /metrics read on one kept-alive connection,
    with its engine key; a 404, a silent replica (given up after READ_TIMEOUT) and an external endpoint left out."""
    text = (DATA / "vllm/vllm-0.32.0-cpu-metrics.txt").read_bytes()
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await reader.readuntil(b"\r\n\r\n"):
            seen.append(head)
            if b"/silent/" in head:
                await asyncio.sleep(READ_TIMEOUT + 5)
            status, body = (b"404 Not Found", b"no") if b"/gone/" in head else (b"200 OK", text)
            writer.write(b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body))
            await writer.drain()

    async def test() -> tuple[dict[int, Load], dict[int, Load]]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        engines = Engines(1, 30)
        reader = LoadReader(engines)
        replicas = (
            Upstream(1, base, "engine-key"),
            Upstream(2, f"{base}/gone", ""),
            Upstream(3, f"{base}/silent", ""),
            Upstream(4, base, "", external=True),
        )
        try:
            return await reader.read(replicas), await reader.read(replicas[:1])
        finally:
            engines.close()
            server.close()

    first, again = run(test)
    assert first == again == {1: Load(0, 0, 0.0)}
    assert seen[0].startswith(b"GET /metrics HTTP/1.1\r\n") and b"Authorization: Bearer engine-key" in seen[0]
    assert sorted(h.split(b" ")[1] for h in seen) == [b"/gone/metrics", b"/metrics", b"/metrics", b"/silent/metrics"]


@pytest.mark.django_db
def test_queue_depth_sums_living_processes_and_leaves_stale_ones_out() -> None:
    r = redis.Redis.from_url(settings.REDIS_URL)
    now = time.time()
    r.delete(depth_key(DEP), depth_key(DEP + 1))
    r.hset(depth_key(DEP), "a:1", json.dumps({"standard": 3, "batch": 5, "at": now}))
    r.hset(depth_key(DEP), "b:2", json.dumps({"standard": 1, "batch": 0, "at": now - 1}))
    r.hset(depth_key(DEP), "c:3", json.dumps({"standard": 40, "batch": 40, "at": now - 600}))  # killed long ago
    r.hset(depth_key(DEP), "d:4", "not json")
    assert queue_depth([DEP, DEP + 1]) == {
        DEP: {"interactive": 0, "standard": 4, "batch": 5},
        DEP + 1: {"interactive": 0, "standard": 0, "batch": 0},
    }
    r.delete(depth_key(DEP))


def test_the_simulator_under_the_priority_policy_runs_lower_priority_values_first() -> None:
    async def test() -> list[int]:
        cfg = parse_config(["--scheduling-policy", "priority", "--max-num-seqs", "1"])
        engine = Engine(cfg, SimMetrics("vllm", "lane", {}))
        engine.pause("new")
        jobs = [engine.submit([[1, 2, 3]], [(2, "length")], priority=p) for p in (20, 10, 0, 10)]
        return [jobs.index(seq.job) for seq in engine.waiting]

    assert run(test) == [2, 1, 3, 0]
    fcfs = parse_config([])
    assert fcfs.scheduling_policy == "fcfs"


def test_ticket_of_a_count_tokens_request_is_plain() -> None:
    p = plan(1, "batch")
    counting = RelayPlan(**{**{f: getattr(p, f) for f in p.__slots__}, "endpoint": "/v1/messages/count_tokens"})
    ticket = Lanes(aioredis.Redis.from_url(settings.REDIS_URL), Engines(1, 1)).ticket(relay_of(counting), Sent())
    assert isinstance(ticket, Ticket) and ticket.lane is None
