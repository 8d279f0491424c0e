"""Relay processes are not killed for being slow (appliance.relay_supervision): two relays under two CPU hogs
with 64 streams open, both frozen (SIGSTOP) for longer than uvicorn's default 5 s health check, as a starved
box leaves them; none is restarted, every stream ends whole and is logged once, not cut, and the web log says
that a relay answered its health check late."""

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import Proc
from tests.gatewayworld import RedisServer
from tests.ledgerworld import Engine, Stream, open_world, stream, within

pytestmark = [pytest.mark.process, pytest.mark.heavy, pytest.mark.django_db(transaction=True)]
FROZEN = 8.0  # seconds both relays stay stopped: past uvicorn's default health check (5 s)
CHUNKS = 120  # per stream, one every 0.25 s: 30 s, all still open when a loaded box has opened the last


def test_starved_relays_with_64_open_streams_are_not_killed_and_every_stream_ends_whole(
    live_env: dict[str, str], tmp_path: Path, admin_user: object
) -> None:
    (tmp_path / "redis").mkdir()
    own_redis = RedisServer(tmp_path / "redis", live_env)  # no other test's FLUSHDB reaches its gateway
    engine = Engine(tmp_path, live_env)
    world = open_world(live_env, tmp_path, admin_user, engine, own_redis.url, HEARTH_WEB_WORKERS="2")
    hogs: list[Proc] = []  # started once every stream flows: a 2-core box under the suite's load opens 64 slowly
    keys = [secret for _, secret in world.keys.values()]
    seen = [Stream() for _ in range(64)]
    relays: set[int] = set()

    async def starve() -> None:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=world.base, timeout=120, limits=limits) as client:
            tasks = [
                asyncio.ensure_future(stream(client, keys[i % 2], "[[every=0.25]] hi", CHUNKS, s))
                for i, s in enumerate(seen)
            ]
            deadline = time.monotonic() + 60
            while len(notes := world.notes()) < 64 or not all(s.chunks for s in seen):
                failed = [(s.status, s.error) for s in seen if s.ended and (s.status != 200 or s.error)]
                assert time.monotonic() < deadline and not failed, (
                    len(notes),
                    sum(bool(s.chunks) for s in seen),
                    failed,
                    world.web.output()[-3000:],
                )
                await asyncio.sleep(0.2)
            hogs.extend(
                Proc([sys.executable, "-c", "while True: pass"], live_env, tmp_path / f"hog{i}.log") for i in range(2)
            )
            relays.update(int(n["process"].split("/")[2]) for n in notes.values())
            for pid in relays:
                os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(FROZEN)
            for pid in relays:
                with contextlib.suppress(ProcessLookupError):  # killed meanwhile: the assertions below say so
                    os.kill(pid, signal.SIGCONT)
            await asyncio.gather(*tasks)

    try:
        asyncio.run(starve())
        assert [(s.chunks, s.done, s.error) for s in seen] == [(CHUNKS, True, "")] * 64
        within(15, lambda: len(world.rows()) == 64)
        assert {(r.status, r.truncated, r.completion_tokens) for r in world.rows()} == {(200, False, CHUNKS)}
    finally:
        for hog in hogs:
            hog.stop()
        world.web.stop()
        engine.proc.stop()
        own_redis.stop()
    log = world.web.output()
    assert len(relays) == 2 and "died" not in log, log[-3000:]  # uvicorn's line for a worker it replaced
    # the supervisor waited on the first frozen relay's answer, and said so
    assert any(f"relay process {pid} answered its health check after" in log for pid in relays), log[-3000:]
