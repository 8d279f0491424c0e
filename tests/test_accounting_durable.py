"""Durable request accounting through real gateway processes (gateway.ledger, gateway.spool_writer): every request
leaves exactly one row, soon after it ends, whatever happens meanwhile, and Redis's spending counters agree with
the rows. Each test runs a gateway of its own Hearth instance, on a Redis server of its own (tests/ledgerworld.py),
in front of tests/held_engine.py, with two keys of one owner: one with a budget, one without limits."""

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.reaper import PROCESS_GONE
from tests.gatewayworld import RedisServer
from tests.ledgerworld import (
    Engine,
    Stream,
    TcpProxy,
    database_url_through,
    open_world,
    paced,
    spent_agrees,
    stream,
    within,
)

pytestmark = [pytest.mark.process, pytest.mark.heavy, pytest.mark.django_db(transaction=True)]
KEEPALIVE = {"HEARTH_SSE_KEEPALIVE": "15"}  # appliance.settings' default


@pytest.fixture
def engine(live_env: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    started = Engine(tmp_path, live_env)
    yield started
    started.proc.stop()


@pytest.fixture
def own_redis(live_env: dict[str, str], tmp_path: Path) -> Iterator[RedisServer]:
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis", live_env)
    yield server
    server.stop()


def test_rows_and_charges_hold_through_the_database_unreachable_under_streams(
    live_env: dict[str, str], tmp_path: Path, admin_user: object, engine: Engine, own_redis: RedisServer
) -> None:
    proxy = TcpProxy(("127.0.0.1", 5432))
    through = {**live_env, "DATABASE_URL": database_url_through(proxy, live_env)}
    world = open_world(through, tmp_path, admin_user, engine, own_redis.url)
    sent: list[Stream] = []
    try:
        asyncio.run(paced(world, 3, 4, sent))
        before = len(sent)
        proxy.cut()
        asyncio.run(paced(world, 20, 4, sent))  # 80 requests while the gateway cannot reach PostgreSQL
        assert len(sent) - before >= 75 and len(world.rows()) <= before  # none of them reached the database
        proxy.restore()
        asyncio.run(paced(world, 3, 4, sent))
        # every stream whole: the database is not on their path
        assert [(s.status, s.error) for s in sent if not s.done] == []
        within(40, lambda: len(world.rows()) >= len(sent))
        rows = world.rows()
        assert len(rows) == len(sent) >= 100
        assert len({r.request_id for r in rows}) == len(rows)
        assert {(r.status, r.completion_tokens, r.prompt_tokens) for r in rows} == {(200, 8, 9)}
        pk = admin_user.pk  # type: ignore[attr-defined]
        within(5, lambda: all(held == logged for held, logged in spent_agrees(world, pk).values()))
        assert spent_agrees(world, pk)["owner"][0] == len(sent) * 17 * 1000  # 17 tokens at 1,000 nano-USD each
    finally:
        world.web.stop()
        proxy.close()
    assert "rows wait in the spool" in world.web.output(), world.web.output()[-3000:]


def test_a_relay_killed_during_16_open_streams_leaves_16_rows_each_cut_with_the_tokens_sent(
    live_env: dict[str, str], tmp_path: Path, admin_user: object, engine: Engine, own_redis: RedisServer
) -> None:
    world = open_world(live_env, tmp_path, admin_user, engine, own_redis.url, HEARTH_WEB_WORKERS="2")
    keys = [secret for _, secret in world.keys.values()]
    seen = [Stream() for _ in range(16)]
    killed: set[int] = set()

    async def hold_then_kill() -> None:
        limits = httpx.Limits(max_connections=16)
        async with httpx.AsyncClient(base_url=world.base, timeout=120, limits=limits) as client:
            tasks = [
                asyncio.ensure_future(stream(client, keys[i % 2], f"[[hold-after={3 + i % 4}]] hi", 50, s))
                for i, s in enumerate(seen)
            ]
            deadline = time.monotonic() + 60
            while not (
                all(s.chunks == 3 + i % 4 for i, s in enumerate(seen))
                and len(notes := world.notes()) == 16
                and sorted(n.get("chunks", 0) for n in notes.values()) == sorted(s.chunks for s in seen)
            ):
                assert time.monotonic() < deadline, ([s.chunks for s in seen], world.notes())
                await asyncio.sleep(0.2)
            for note in notes.values():
                killed.add(int(note["process"].split("/")[2]))
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
            await asyncio.gather(*tasks)

    try:
        asyncio.run(hold_then_kill())
        assert all(s.error and not s.done for s in seen)  # each cut by the death
        within(30, lambda: len(world.rows()) == 16)
        rows = world.rows()
        assert sorted(r.completion_tokens or 0 for r in rows) == sorted(s.chunks for s in seen)
        assert {(r.status, r.truncated, r.usage_estimated, r.prompt_tokens) for r in rows} == {(200, True, True, None)}
        assert len({r.request_id for r in rows}) == 16 and world.notes() == {}
        pk = admin_user.pk  # type: ignore[attr-defined]
        agree = spent_agrees(world, pk)
        assert all(held == logged for held, logged in agree.values()), agree
        assert agree["owner"][0] == sum(s.chunks for s in seen) * 1000  # only the tokens sent: 1,000 nano-USD each
    finally:
        world.web.stop()
    assert all(f"Child process [{pid}] died" in world.web.output() for pid in killed)


def test_a_relay_killed_mid_stream_records_the_chunks_the_c_relayed_by_its_last_note(
    live_env: dict[str, str], tmp_path: Path, admin_user: object, engine: Engine, own_redis: RedisServer
) -> None:
    """A trial killed a relay 4.6 s into a steady stream: its row said 2 tokens, its note's count from before the
    stream went to gateway.fast_forward, which a steady stream never leaves. Rows now hold the count of a note at
    most a few seconds old (that notes read the C's count: tests/test_gateway_ledger.py), and say the client's
    connection was cut."""
    # the default keep-alive (the suite's 1 s would note the C's count at each keep-alive check)
    world = open_world(live_env, tmp_path, admin_user, engine, own_redis.url, HEARTH_WEB_WORKERS="2", **KEEPALIVE)
    seen = [Stream() for _ in range(4)]
    killed: set[int] = set()

    async def kill_mid_stream() -> None:
        async with httpx.AsyncClient(base_url=world.base, timeout=120) as client:
            key = next(iter(world.keys.values()))[1]
            tasks = [asyncio.ensure_future(stream(client, key, "[[every=0.05]] hi", 400, s)) for s in seen]
            deadline = time.monotonic() + 60
            while not (len(notes := world.notes()) == 4 and all(n.get("chunks", 0) >= 40 for n in notes.values())):
                assert time.monotonic() < deadline, ([s.chunks for s in seen], world.notes())
                await asyncio.sleep(0.2)
            killed.update(int(note["process"].split("/")[2]) for note in notes.values())
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
            await asyncio.gather(*tasks)

    try:
        asyncio.run(kill_mid_stream())
        assert all(s.error and not s.done and s.chunks < 400 for s in seen)
        within(30, lambda: len(world.rows()) == 4)
        rows = world.rows()
        assert all(40 <= (r.completion_tokens or 0) <= max(s.chunks for s in seen) for r in rows), rows
        assert {r.error for r in rows} == {PROCESS_GONE} and "connection was cut with no error message" in PROCESS_GONE
    finally:
        world.web.stop()


def test_after_a_burst_every_row_is_in_the_database_within_10_s_of_its_request_s_end(
    live_env: dict[str, str], tmp_path: Path, admin_user: object, engine: Engine, own_redis: RedisServer
) -> None:
    world = open_world(live_env, tmp_path, admin_user, engine, own_redis.url, HEARTH_WEB_WORKERS="2")
    keys = [secret for _, secret in world.keys.values()]
    seen = [Stream() for _ in range(64)]

    async def burst() -> None:
        async with httpx.AsyncClient(base_url=world.base, timeout=60, limits=httpx.Limits(max_connections=64)) as c:
            await asyncio.gather(*(stream(c, keys[i % 2], "[[every=0.02]] hi", 20, s) for i, s in enumerate(seen)))

    try:
        asyncio.run(burst())
        assert all(s.done and s.chunks == 20 for s in seen)
        first_seen: dict[str, float] = {}
        deadline = time.monotonic() + 30
        while len(first_seen) < 64 and time.monotonic() < deadline:
            now = time.time()
            for row in world.rows():
                first_seen.setdefault(row.request_id or "", now)
            time.sleep(0.1)
        rows = world.rows()
        late = {r.request_id: round(first_seen[r.request_id or ""] - r.created_at.timestamp(), 1) for r in rows}
        assert len(rows) == 64 and max(late.values()) <= 10.0, late
    finally:
        world.web.stop()
