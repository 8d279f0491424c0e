"""The gateway's ledger against the real Redis and database, in this process: a request noted at its start, ended
once (FINISH: note removed, settled or charged, row spooled), recorded as cut by another process when its own is
gone (gateway.reaper), ends Redis did not take tried again, and the spool written to the request log once per
request (gateway.spool_writer, beat's request_spool.drain). Each test has a Hearth instance of its own, so no
other process reads its spool."""

import asyncio
import json
import secrets
import socket
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test import override_settings
from redis.exceptions import ConnectionError as RedisConnectionError

from console.access.keys import create_key
from console.deployments import activity
from console.observability import request_spool
from console.observability.cost import price_per_token
from console.observability.models import RequestLog
from console.observability.request_rows import decode, write_rows
from console.observability.request_spool import alive_key, notes_key, processes_key, spool_key
from gateway.accounting import Outcome
from gateway.answers import for_request
from gateway.errors import Surface
from gateway.ledger import Ledger
from gateway.prices import Prices
from gateway.quotas import Quota
from gateway.reaper import PROCESS_GONE, gone_here, process_identity, reap
from gateway.registry import KeyEntry, Route, Upstream
from gateway.relay_plan import RelayPlan
from gateway.relay_state import RelayState
from gateway.request_ids import request_ids
from gateway.reservations import Reservations, counter_keys
from gateway.spool_writer import SpoolWriter
from gateway.sse import StreamKind

pytestmark = pytest.mark.django_db(transaction=True)
DEPLOYMENT = 90_002  # no deployment of the suite has this id
PRICE = "0.000001"  # USD per token: 1,000 nano-USD


@pytest.fixture(autouse=True)
def own_instance() -> Iterator[redis.Redis]:
    with override_settings(HEARTH_INSTANCE=f"ledger-test-{secrets.token_hex(4)}"):
        r = redis.Redis.from_url(settings.REDIS_URL)
        r.set(price_per_token(DEPLOYMENT), PRICE, ex=600)
        yield r


def key_entry(key_id: int, quota: Quota) -> KeyEntry:
    return KeyEntry(key_id, "hk-test", "", frozenset(), None, None, quota)


def plan(key: KeyEntry, reserve: int = 0, model: str = "m", deployment_id: int = DEPLOYMENT) -> RelayPlan:
    """A streaming chat request's plan for ``key``, routed to ``model`` of ``deployment_id`` (an engine that is not
    there: the ledger never reaches it), reserving ``reserve`` tokens."""
    target = Route(model, (Upstream(0, "http://127.0.0.1:9", "k"),), 8192, 0, deployment_id=deployment_id)
    return RelayPlan(
        key=key,
        route=target,
        endpoint="/v1/chat/completions",
        surface=Surface.OPENAI,
        stream=True,
        arrived=time.monotonic(),
        engine_path="/v1/chat/completions",
        body=b"{}",
        prefix=b"",
        kind=StreamKind.CHAT,
        request={"model": model},
        keepalive_every=15.0,
        idle_timeout=600.0,
        retry_after=1,
        reserve=reserve,
    )


def state() -> RelayState:
    return RelayState(for_request("/v1/chat/completions", {}), quiet_since=time.monotonic())


def ended(key: KeyEntry, prompt: int, completion: int) -> Outcome:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    return Outcome(key.id, key.prefix, "m", "openai", "/v1/chat/completions", True, 200, "stop", usage)


def spooled(r: redis.Redis) -> list[tuple[dict[str, Any], bytes]]:
    return [(decode(f[b"row"]), f[b"cost"]) for _, f in r.xrange(spool_key())]


def live_key(name: str, **limits: Any) -> int:
    return create_key(name, None, **limits)[0].pk


def test_a_request_is_noted_at_its_start_and_ended_once_with_its_row_and_charge(own_instance: redis.Redis) -> None:
    r = own_instance
    free = key_entry(live_key("free"), Quota())
    budget = key_entry(live_key("budget"), Quota(daily_usd=Decimal(10)))

    async def check() -> None:
        ledger = Ledger(Reservations(Prices()))
        try:
            tickets = [
                ledger.ticket(plan(free), state(), request_ids([])),
                ledger.ticket(plan(budget, reserve=100), state(), request_ids([])),
            ]
            ledger.note(tickets[0])
            await tickets[0].noting  # sent at the event loop's next turn, with any other note of this one
            held = await ledger.admit(tickets[1], plan(budget, reserve=100))
            notes = {k.decode(): json.loads(v) for k, v in r.hgetall(ledger.notes).items()}
            assert notes[tickets[1].request_id]["held"] == [str(held.cost), PRICE] and held.cost == 100_000
            assert notes[tickets[0].request_id]["key_id"] == free.id
            for ticket, key in zip(tickets, (free, budget), strict=True):
                await ledger.close(ticket, ended(key, 9, 11))
            await ledger.reservations.charges.flush()
            assert r.hlen(ledger.notes) == 0 and ledger.open == {}
            rows = spooled(r)
            assert [(row["request_id"], cost) for row, cost in rows] == [(t.request_id, b"20000") for t in tickets]
            assert [row["completion_tokens"] for row, _ in rows] == [11, 11]
            day = counter_keys(budget.id, None, DEPLOYMENT, time.time())
            assert [int(r.get(day[4]) or 0), int(r.get(day[2]) or 0), r.zcard(day[3])] == [20_000, 20, 0]
            assert int(r.get(counter_keys(free.id, None, DEPLOYMENT, time.time())[4]) or 0) == 20_000
            keys, args = [ledger.notes, spool_key()], [tickets[0].request_id, 1, "{}", "", 0]
            assert await ledger.finishes.one(keys=keys, args=args) == 0  # ended already: nothing done
            assert len(spooled(r)) == 2
        finally:
            await ledger.reservations.close()

    asyncio.run(check())


def test_while_redis_is_away_rows_go_to_the_database_directly_and_ends_are_settled_once_it_answers(
    own_instance: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = own_instance
    budget = key_entry(live_key("budget"), Quota(daily_usd=Decimal(10)))

    async def check() -> None:
        ledger = Ledger(Reservations(Prices()))
        finish = ledger.finishes.one

        async def refused(*args: Any, **kwargs: Any) -> int:
            raise RedisConnectionError("down")

        try:
            early = ledger.ticket(plan(budget, reserve=100), state(), request_ids([]))
            await ledger.admit(early, plan(budget, reserve=100))
            await ledger.close(early, ended(budget, 9, 1))  # spooled just before Redis goes away
            ticket = ledger.ticket(plan(budget, reserve=100), state(), request_ids([]))
            await ledger.admit(ticket, plan(budget, reserve=100))
            monkeypatch.setattr(ledger.finishes, "one", refused)  # the tries again
            monkeypatch.setattr(ledger.finishes, "finish", refused)  # the ends' batches
            await ledger.close(ticket, ended(budget, 9, 3))
            await ledger._retry()  # Redis still away: both rows go to the database directly
            assert [end.written for end in ledger.unsent] == [True] and ledger.unwritten == []
            assert await asyncio.to_thread(written, ticket.request_id)
            assert await asyncio.to_thread(written, early.request_id)  # lost with a Redis that restarts empty
            day = counter_keys(budget.id, None, DEPLOYMENT, time.time())[4]
            assert int(r.get(day) or 0) == 110_000 and r.hlen(ledger.notes) == 1  # one reserved, not settled yet
            monkeypatch.setattr(ledger.finishes, "one", finish)
            await ledger._retry()
            assert ledger.unsent == [] and r.hlen(ledger.notes) == 0 and int(r.get(day) or 0) == 22_000
            assert await asyncio.to_thread(drained) == 2  # spooled too: written once all the same
            assert [await asyncio.to_thread(rows_of_request, t.request_id) for t in (early, ticket)] == [1, 1]
        finally:
            await ledger.writer.stop()
            await ledger.reservations.close()

    asyncio.run(check())


def drained() -> int:
    try:
        return request_spool.drain("beat-test")
    finally:
        connection.close()


def rows_of_request(request_id: str) -> int:
    try:
        return RequestLog.objects.filter(request_id=request_id).count()
    finally:
        connection.close()


def test_the_requests_of_a_gone_process_are_recorded_as_cut_with_what_they_were_sent(
    own_instance: redis.Redis,
) -> None:
    r = own_instance
    free = key_entry(live_key("free"), Quota())
    budget = key_entry(live_key("budget"), Quota(daily_usd=Decimal(10)))
    dead = f"{socket.gethostname()}/{process_identity().split('/')[1]}/4194300/1"  # no such PID here
    elsewhere = "another-host/ns/12/34"  # its alive key expired
    assert gone_here(dead) and not gone_here(elsewhere) and not gone_here(process_identity())

    async def check() -> None:
        ledger = Ledger(Reservations(Prices()))
        ledger.notes = notes_key(dead)  # its requests noted as the dead process's
        try:
            tickets = [
                ledger.ticket(plan(free), state(), request_ids([])),
                ledger.ticket(plan(budget, reserve=100), state(), request_ids([])),
            ]
            ledger.note(tickets[0])
            await tickets[0].noting  # sent at the event loop's next turn, with any other note of this one
            await ledger.admit(tickets[1], plan(budget, reserve=100))
            for ticket, chunks in zip(tickets, (4, 3), strict=True):
                ticket.state.status, ticket.state.token_chunks = 200, chunks
            tickets[1].state.live_token_chunks = lambda: 7  # 4 more relayed by gateway.fast_forward's C so far
            await ledger._register()  # as its loop does first
            await ledger._renew()  # the progress its loop writes every TICK seconds
            r.sadd(processes_key(), dead, elsewhere, ledger.process)
            r.set(alive_key(dead), "1", ex=60)  # alive by its key, gone by its PID
            r.set(alive_key(elsewhere), "1", ex=60)  # gone only when its alive key expires
            r.hset(notes_key(elsewhere), "abc", json.dumps({"key_id": free.id}))
            r.set(alive_key(ledger.process), "1", ex=60)
            r.hset(notes_key(ledger.process), "mine", "{}")
            assert await reap(ledger.redis, ledger.finishes.one, ledger.process) == 2
            rows = {row["request_id"]: (row, cost) for row, cost in spooled(r)}
            assert set(rows) == {t.request_id for t in tickets}
            for ticket, chunks in zip(tickets, (4, 7), strict=True):
                row, cost = rows[ticket.request_id]
                assert (row["status"], row["truncated"], row["completion_tokens"], row["prompt_tokens"]) == (
                    200,
                    True,
                    chunks,
                    None,
                )
                assert cost == str(chunks * 1000).encode()
                assert row["error"] == PROCESS_GONE  # the Requests page says why; its client was told nothing
            day = counter_keys(budget.id, None, DEPLOYMENT, time.time())
            assert [int(r.get(day[4]) or 0), int(r.get(day[2]) or 0), r.zcard(day[3])] == [7000, 7, 0]
            assert int(r.get(counter_keys(free.id, None, DEPLOYMENT, time.time())[4]) or 0) == 4000
            assert {p.decode() for p in r.smembers(processes_key())} == {elsewhere, ledger.process}
            assert r.hlen(notes_key(elsewhere)) == 1 and r.hlen(notes_key(ledger.process)) == 1
            assert await reap(ledger.redis, ledger.finishes.one, ledger.process) == 0  # recorded once
        finally:
            await ledger.reservations.close()

    asyncio.run(check())


def test_a_redis_that_lost_everything_gets_the_process_and_its_requests_in_flight_back(
    own_instance: redis.Redis,
) -> None:
    """compose's Redis keeps nothing across a restart: the panels read the requests running from the noting
    processes' notes, and the idle policy reads the deployments' requests in flight."""
    r = own_instance
    free, budget = key_entry(live_key("free"), Quota()), key_entry(live_key("budget"), Quota(daily_usd=Decimal(10)))

    async def check() -> None:
        ledger = Ledger(Reservations(Prices()))
        try:
            await ledger._register()
            tickets = [
                ledger.ticket(plan(free), state(), request_ids([])),
                ledger.ticket(plan(budget, reserve=100), state(), request_ids([])),
            ]
            ledger.note(tickets[0])
            await tickets[0].noting
            await ledger.admit(tickets[1], plan(budget, reserve=100))
            tickets[0].state.status, tickets[0].state.token_chunks = 200, 5
            await ledger._renew()
            assert r.hlen(ledger.notes) == 2
            r.unlink(*r.keys(f"hearth:{settings.HEARTH_INSTANCE}:*"))  # the restart
            await ledger._renew()  # its next round
            await asyncio.gather(*(t.noting for t in tickets if t.noting is not None))
            assert {p.decode() for p in r.smembers(processes_key())} == {ledger.process}
            assert {k.decode() for k in r.hkeys(ledger.notes)} == {t.request_id for t in tickets}
            in_flight = {m.decode() for m in r.zrange(activity.in_flight_key(DEPLOYMENT), 0, -1)}
            assert in_flight == {t.request_id for t in tickets}
            await ledger._renew()  # the progress rewritten
            assert json.loads(r.hget(ledger.notes, tickets[0].request_id) or "{}")["chunks"] == 5
            for ticket, key in zip(tickets, (free, budget), strict=True):
                await ledger.close(ticket, ended(key, 9, 11))
            assert r.hlen(ledger.notes) == 0 and r.zcard(activity.in_flight_key(DEPLOYMENT)) == 0
        finally:
            await ledger.reservations.close()

    asyncio.run(check())


def row(key_id: int | None, request_id: str, cost: int | None = 5000, **more: Any) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "created_at": time.time(),
        "api_key_id": key_id,
        "model": "m",
        "surface": "openai",
        "endpoint": "/v1/chat/completions",
        "status": 200,
        "duration_seconds": 1.0,
        "cost_usd": cost,
        **more,
    }


def test_rows_are_written_once_per_request_and_one_bad_row_holds_up_no_other() -> None:
    key_id = live_key("k")
    assert write_rows([row(key_id, "a" * 32), row(key_id, "b" * 32)]) == 2
    assert write_rows([row(key_id, "a" * 32), row(key_id, "c" * 32)]) == 2  # "a" again: left as it was
    assert write_rows([row(999_999_999, "d" * 32, model="x" * 300), row(key_id, "e" * 32)]) == 2
    rows = {r.request_id: r for r in RequestLog.objects.all()}
    assert sorted(rows) == ["a" * 32, "b" * 32, "c" * 32, "d" * 32, "e" * 32]
    assert rows["d" * 32].api_key_id is None and rows["d" * 32].model == "x" * 200  # mended: its key is gone
    assert rows["a" * 32].cost_usd == Decimal("0.000005000")


def spool(r: redis.Redis, *rows: dict[str, Any]) -> None:
    for one in rows:
        cost = one.pop("cost_usd")
        r.xadd(spool_key(), {"row": json.dumps(one), "cost": "" if cost is None else str(cost)})


def test_beats_drain_writes_what_waits_in_the_spool_and_deletes_it(own_instance: redis.Redis) -> None:
    r, key_id = own_instance, live_key("k")
    spool(r, row(key_id, "f" * 32), row(key_id, "g" * 32, cost=None))
    r.xadd(spool_key(), {"nothing": "here"})  # no row: dropped, never read again
    assert request_spool.drain("beat-test") == 2
    assert r.xlen(spool_key()) == 0
    costs = dict(RequestLog.objects.values_list("request_id", "cost_usd"))
    assert costs == {"f" * 32: Decimal("0.000005000"), "g" * 32: None}


def written(request_id: str) -> bool:
    """Whether the row is in the database (on a thread of its own, whose connection is closed after)."""
    try:
        return RequestLog.objects.filter(request_id=request_id).exists()
    finally:
        connection.close()


def test_each_gateway_process_writes_the_spool_as_it_comes(own_instance: redis.Redis) -> None:
    r, key_id = own_instance, live_key("k")

    async def check() -> None:
        writer = SpoolWriter("writer-test")
        writer.start()
        try:
            spool(r, row(key_id, "h" * 32))  # before or after its group is made: the group reads from the start
            deadline = time.monotonic() + 5
            while not await asyncio.to_thread(written, "h" * 32):
                assert time.monotonic() < deadline, "the row was not written within 5 s"
                await asyncio.sleep(0.05)
            while r.xlen(spool_key()):
                assert time.monotonic() < deadline, "the entry was not deleted"
                await asyncio.sleep(0.05)
        finally:
            await writer.stop()

    asyncio.run(check())
