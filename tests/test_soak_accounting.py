"""Issue 28's acceptance for durable request accounting at its full numbers (`make soak`; test_accounting_durable.py
holds the scaled-down versions that `make test` runs): PostgreSQL stopped for 60 s under 8 streams a second, then
started; the data disk full for 60 s under the same load, then space freed; 64 streaming clients for 5 minutes,
then silence. Each runs a gateway of its own Hearth instance (two relay processes) on a Redis server of its own, in
front of tests/held_engine.py, with two keys of one owner (tests/ledgerworld.py). Each test prints its numbers."""

import asyncio
import shutil
import statistics
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.models import User
from django.db import connection

from console.observability.models import RequestLog
from tests.gatewayworld import RedisServer
from tests.ledgerworld import Engine, Stream, World, open_world, paced, run, spent_agrees, stream, within
from tests.private_postgres import PrivatePostgres, django_on

pytestmark = [pytest.mark.soak, pytest.mark.process, pytest.mark.django_db(transaction=True)]
OUTAGE = 60.0  # seconds the database is stopped, or its disk full (issue 28)
RATE = 8.0  # streams a second meanwhile (issue 28)
SOAK = 300.0  # seconds of the soak (issue 28: 5 minutes)
CLIENTS = 64  # streaming clients of the soak, each sending its next request when the last ends
LATE = 10.0  # seconds within which a row is in the database after its request ended (issue 28)


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


@pytest.fixture
def postgres(live_env: dict[str, str], tmp_path: Path) -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of the test's own on a 256 MiB tmpfs, its database named as the test database."""
    server = PrivatePostgres(connection.settings_dict["NAME"], tmp_path / "postgres.log", live_env, disk_mib=256)
    yield server
    server.close()


def whole_and_logged(world: World, sent: list[Stream], tokens: int) -> list[RequestLog]:
    """Every stream sent ended whole, and the database comes to hold one row per stream (within 60 s), each
    answered 200 with ``tokens`` completion tokens; the rows."""
    assert [(s.status, s.error) for s in sent if not s.done] == []
    within(60, lambda: len(world.rows()) >= len(sent))
    rows = world.rows()
    assert len(rows) == len(sent)
    assert len({r.request_id for r in rows}) == len(rows)
    assert {(r.status, r.completion_tokens, r.prompt_tokens) for r in rows} == {(200, tokens, 9)}
    return rows


def charges_agree(world: World, owner_id: int, tokens: int) -> dict[str, tuple[int, int]]:
    """Redis's charges equal the rows' for each key and the owner, and the owner's are ``tokens`` at 1,000 nano-USD
    each (ledgerworld.PRICE); (Redis, rows) per key and for the owner, nano-USD."""
    within(10, lambda: all(held == logged for held, logged in spent_agrees(world, owner_id).values()))
    agree = spent_agrees(world, owner_id)
    assert agree["owner"][0] == tokens * 1000, agree
    return agree


def test_postgresql_stopped_60_s_under_8_streams_a_second_then_started_every_request_has_its_row_and_charge(
    live_env: dict[str, str], tmp_path: Path, postgres: PrivatePostgres, engine: Engine, own_redis: RedisServer
) -> None:
    env = {**live_env, "DATABASE_URL": postgres.url}
    sent: list[Stream] = []
    with django_on(postgres):
        owner = User.objects.create_user("owner")
        world = open_world(env, tmp_path, owner, engine, own_redis.url, HEARTH_WEB_WORKERS="2")
        try:
            run(paced(world, 5, RATE, sent))
            before = len(sent)
            postgres.stop()
            stopped = time.monotonic()
            run(paced(world, OUTAGE, RATE, sent))
            during, away = len(sent) - before, time.monotonic() - stopped
            postgres.start()
            connection.close()  # the test's own connection went with the server
            run(paced(world, 5, RATE, sent))
            assert during >= 0.95 * OUTAGE * RATE, during
            rows = whole_and_logged(world, sent, 8)
            agree = charges_agree(world, owner.pk, len(sent) * (8 + 9))
        finally:
            world.web.stop()
    assert "rows wait in the spool" in world.web.output(), world.web.output()[-3000:]
    print(f"\nsoak numbers: sent {len(sent)} ({during} in the {away:.0f} s stopped), rows {len(rows)}, charges {agree}")


def fill(disk: Path) -> Path:
    """A file that takes every free byte of ``disk``; returns it."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as out:
        try:
            while out.write(b"\0" * 65536):
                pass
        except OSError:  # ENOSPC
            pass
    return filler


def test_the_data_disk_full_60_s_under_8_streams_a_second_then_freed_every_request_has_its_row_and_charge(
    live_env: dict[str, str], tmp_path: Path, postgres: PrivatePostgres, engine: Engine, own_redis: RedisServer
) -> None:
    """The data disk: one tmpfs holding HEARTH_DATA_DIR (the web server's metrics folder, as `make up` puts it,
    and its engines' folder) and the database's data folder, as on a one-disk box; full, the database cannot
    add pages to the request log, and the rows wait in the Redis spool."""
    data = postgres.disk / "hearth"
    data.mkdir()
    env = {**live_env, "DATABASE_URL": postgres.url, "HEARTH_DATA_DIR": str(data)}
    env |= {"PROMETHEUS_MULTIPROC_DIR": str(data / "run" / "prometheus")}
    sent: list[Stream] = []
    with django_on(postgres):
        owner = User.objects.create_user("owner")
        world = open_world(env, tmp_path, owner, engine, own_redis.url, HEARTH_WEB_WORKERS="2")
        try:
            run(paced(world, 5, RATE, sent))
            postgres.checkpoint()  # the WAL written out and its segments recycled: none need new space while full
            filler = fill(postgres.disk)
            assert shutil.disk_usage(postgres.disk).free < 65536
            before, full_at = len(sent), time.monotonic()
            run(paced(world, OUTAGE, RATE, sent))
            during, full_for = len(sent) - before, time.monotonic() - full_at
            connection.close()
            waiting = len(sent) - len(world.rows())  # rows the full disk held back
            filler.unlink()
            run(paced(world, 5, RATE, sent))
            assert during >= 0.95 * OUTAGE * RATE and waiting > 0, (during, waiting)
            rows = whole_and_logged(world, sent, 8)
            agree = charges_agree(world, owner.pk, len(sent) * (8 + 9))
        finally:
            world.web.stop()
    assert "rows wait in the spool" in world.web.output(), world.web.output()[-3000:]
    print(
        f"\nsoak numbers: sent {len(sent)} ({during} in the {full_for:.0f} s full), {waiting} rows waiting when "
        f"space was freed, rows {len(rows)}, charges {agree}"
    )


class RowTimes(threading.Thread):
    """When each of ``world``'s rows was first seen in the database, looked for every 0.5 s among the rows of
    the last WINDOW seconds: ``seen``, request id → Unix seconds. A row that comes later than that is not seen
    here, and counts as seen at the end (``late``)."""

    WINDOW = 30.0

    def __init__(self, world: World) -> None:
        super().__init__(daemon=True)
        self.keys = [key_id for key_id, _ in world.keys.values()]
        self.seen: dict[str, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        try:
            while not self.done.wait(0.5):
                since = datetime.fromtimestamp(time.time() - self.WINDOW, UTC)
                found = RequestLog.objects.filter(api_key_id__in=self.keys, created_at__gte=since)
                ids = list(found.values_list("request_id", flat=True))
                now = time.time()
                for request_id in ids:
                    self.seen.setdefault(request_id or "", now)
        finally:
            connection.close()  # this thread's own

    def late(self, rows: list[RequestLog]) -> list[float]:
        """Seconds from each row's request's end (its created_at) to the row seen in the database."""
        self.done.set()
        self.join()
        now = time.time()
        return [self.seen.get(r.request_id or "", now) - r.created_at.timestamp() for r in rows]


async def soak(world: World, seconds: float, sent: list[Stream]) -> None:
    """CLIENTS clients, each streaming 20 chunks 0.1 s apart (2 s) and then its next request, for ``seconds``;
    a client whose stream fails stops."""
    keys = [secret for _, secret in world.keys.values()]
    ends = time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=world.base, timeout=60, limits=httpx.Limits(max_connections=CLIENTS)) as c:

        async def client(i: int) -> None:
            while time.monotonic() < ends:
                seen = Stream()
                sent.append(seen)
                await stream(c, keys[i % 2], "[[every=0.1]] hi", 20, seen)
                if seen.error or seen.status != 200:
                    return

        await asyncio.gather(*(client(i) for i in range(CLIENTS)))


def test_a_5_minute_soak_of_64_streaming_clients_then_silence_leaves_every_row_within_10_s_of_its_end(
    live_env: dict[str, str], tmp_path: Path, admin_user: User, engine: Engine, own_redis: RedisServer
) -> None:
    world = open_world(live_env, tmp_path, admin_user, engine, own_redis.url, HEARTH_WEB_WORKERS="2")
    watch = RowTimes(world)
    sent: list[Stream] = []
    try:
        watch.start()
        began = time.monotonic()
        run(soak(world, SOAK, sent))
        soaked = time.monotonic() - began
        rows = whole_and_logged(world, sent, 20)  # then silence: no request comes after the soak's last
        late = watch.late(rows)
        agree = charges_agree(world, admin_user.pk, len(sent) * (20 + 9))
    finally:
        watch.done.set()
        world.web.stop()
    assert max(late) <= LATE, sorted(late)[-20:]
    p50, p99 = statistics.quantiles(late, n=100)[49], statistics.quantiles(late, n=100)[98]
    print(
        f"\nsoak numbers: {len(sent)} requests in {soaked:.0f} s, rows {len(rows)}, row after its request's end: "
        f"p50 {p50:.2f} s, p99 {p99:.2f} s, max {max(late):.2f} s; charges {agree}"
    )
