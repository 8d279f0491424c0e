"""Priority lanes across relay processes (gateway.lanes, gateway.lane_depth): the appliance runs one relay process
per core, each with its own lanes. A trial's two processes sent 7 of 7 batch lines on while the other's standard
requests waited (standard TTFT p50 7.8 s against 1.6 s with one process), and both filled the place kept for
interactive requests (one waited 5.9 s in the engine's queue). Two Lanes here stand for two processes, each with its
own name in the queue depth, on the run's Redis; the replicas' readings come from a stand-in reader."""

import asyncio
import time

import pytest
import redis.asyncio as aioredis
from django.conf import settings
from django.test import override_settings

from gateway import lane_depth
from gateway import lanes as lanes_module
from gateway.engine_load import Load
from gateway.lanes import Lanes, Reading
from gateway.snapshot import Route
from gateway.upstream import Engines
from tests.test_lanes import DEP, ROUTE, Readings, Sent, plan, relay_of, run, settled

FOUR = Route("lane", ROUTE.upstreams, 8192, 0, deployment_id=DEP, max_num_seqs=4)  # 3 places, 1 for interactive


def process(r: aioredis.Redis, name: str, load: Load) -> tuple[Lanes, Readings]:
    gate, readings = Lanes(r, Engines(1, 1), process=name), Readings()
    gate.reader = readings  # type: ignore[assignment]
    readings.load = load
    return gate, readings


@override_settings(HEARTH_LANES=True, HEARTH_LANE_HOLD_TIMEOUT=20.0)
def test_batch_waits_behind_standard_requests_another_process_holds() -> None:
    async def test() -> None:
        r = aioredis.Redis.from_url(settings.REDIS_URL)
        await r.delete(lane_depth.depth_key(DEP))
        full = Load(running=3, waiting=0, kv_usage=0.3)  # at max_num_seqs less the place kept for interactive
        a, a_reads = process(r, "a:1", full)
        b, b_reads = process(r, "b:2", full)
        a_first = a.ticket(relay_of(plan(1, "interactive", FOUR)), Sent())  # each process has traffic, read
        b_first = b.ticket(relay_of(plan(1, "interactive", FOUR)), Sent())
        await asyncio.gather(a_first.before(), b_first.before())  # type: ignore[misc]
        await asyncio.gather(settled(a_reads), settled(b_reads))
        standard = a.ticket(relay_of(plan(2, "standard", FOUR)), Sent())
        batch = b.ticket(relay_of(plan(3, "batch", FOUR)), Sent())
        waits = [asyncio.ensure_future(t.before()) for t in (standard, batch)]  # type: ignore[misc]
        await asyncio.gather(settled(a_reads), settled(b_reads))
        assert not standard.admitted and not batch.admitted
        assert b._lanes[DEP].standard_elsewhere == 1  # a's held standard request, read from its queue depth
        b_reads.load = Load(running=1, waiting=0, kv_usage=0.1)  # room in b's reading first
        await settled(b_reads, 3)
        assert not batch.admitted  # a standard request still waits in a
        a_reads.load = Load(running=1, waiting=0, kv_usage=0.1)
        await asyncio.wait_for(waits[0], 2)
        await asyncio.wait_for(waits[1], 2)  # once a sent its standard one on, b's batch goes
        assert standard.admitted and batch.admitted
        for ticket in (a_first, b_first, standard, batch):
            ticket.done()
        await asyncio.gather(a.close(), b.close())
        await r.delete(lane_depth.depth_key(DEP))
        await r.aclose()

    run(test)


def test_two_processes_that_read_one_place_free_send_one_request_on_between_them_not_two(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both read the same moment: two places taken of the three below the one kept for interactive requests."""
    monkeypatch.setattr(lanes_module, "ROTATE_EVERY", 1e12)  # the first turn for as long as the test runs
    r = aioredis.Redis.from_url(settings.REDIS_URL)
    lanes = {}
    for name, other in (("a:1", "b:2"), ("b:2", "a:1")):
        lane = Lanes(r, Engines(1, 1), process=name).ticket(relay_of(plan(1, "standard", FOUR)), Sent()).lane
        assert lane is not None
        lane.reading = Reading(running=2, waiting=0, kv_usage=0.2, capacity=4, at=time.monotonic())
        lane.holders = [other]  # each holds requests: the other's queue depth says so
        lanes[name] = lane
    assert not lanes["a:1"].saturated() and lanes["b:2"].saturated()  # the place is a's, in this turn
    lanes["a:1"].admitted_since = 1  # a sent one on: full for it too until the next reading
    assert lanes["a:1"].saturated()
    lanes["a:1"].ended_since = 1  # and one of its own ended: b's next reading sees that place free too
    assert lanes["a:1"].saturated()
    lanes["a:1"].holders = lanes["b:2"].holders = []  # alone: the whole room is each one's
    assert not lanes["b:2"].saturated()


@pytest.mark.parametrize(
    ("holders", "room", "turns"),
    [((), 3, [{"a:1": 3}] * 2), (("b:2",), 3, [{"a:1": 2, "b:2": 1}, {"a:1": 1, "b:2": 2}])],
)
def test_the_room_is_shared_equally_the_remainder_to_each_in_turn(
    holders: tuple[str, ...], room: int, turns: list[dict[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check's process second by name got no share of one free place for 42–51 s while the first's newer requests
    went on at once."""
    r = aioredis.Redis.from_url(settings.REDIS_URL)
    for second, shares in enumerate(turns):
        monkeypatch.setattr(lanes_module.time, "time", lambda at=float(second): at)
        for name, share in shares.items():
            lane = Lanes(r, Engines(1, 1), process=name).ticket(relay_of(plan(1, "standard")), Sent()).lane
            assert lane is not None
            lane.holders = [h for h in ("a:1", *holders) if h != name]
            assert lane._share(room) == share


@override_settings(HEARTH_LANES=True)
def test_a_process_holding_only_batch_work_behind_standard_requests_takes_no_share_of_the_room() -> None:
    async def test() -> tuple[list[str], list[str]]:
        r = aioredis.Redis.from_url(settings.REDIS_URL)
        await r.delete(lane_depth.depth_key(DEP))
        await lane_depth.publish(r, DEP, "a:1", {"standard": 0, "batch": 4})  # blocked: standard waits in b
        await lane_depth.publish(r, DEP, "b:2", {"standard": 3, "batch": 0})
        c = Lanes(r, Engines(1, 1), process="c:3").ticket(relay_of(plan(1, "standard", FOUR)), Sent()).lane
        assert c is not None
        await c._read_elsewhere()
        blocked = c.holders
        await lane_depth.publish(r, DEP, "b:2", {"standard": 0, "batch": 1})  # no standard request waits now
        await c._read_elsewhere()
        await r.delete(lane_depth.depth_key(DEP))
        await r.aclose()
        return blocked, sorted(c.holders)

    assert run(test) == (["b:2"], ["a:1", "b:2"])


def test_a_new_standard_request_waits_its_turn_behind_one_another_process_holds() -> None:
    """A check's newer standard requests went on in one process while older ones waited 16-19 s in the other."""
    r = aioredis.Redis.from_url(settings.REDIS_URL)
    lane = Lanes(r, Engines(1, 1), process="a:1").ticket(relay_of(plan(1, "standard", FOUR)), Sent()).lane
    assert lane is not None
    lane.reading = Reading(running=1, waiting=0, kv_usage=0.1, capacity=4, at=time.monotonic())  # room for two
    assert not lane.must_wait("standard")
    lane.standard_elsewhere, lane.holders = 1, ["b:2"]  # b holds an older one
    assert lane.must_wait("standard") and lane.must_wait("batch") and not lane.must_wait("interactive")
