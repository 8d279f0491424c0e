"""Each gateway process's writer of the request log spool (console.observability.request_spool): it reads the
entries as they come (a blocking read on its own Redis connection, so a row is in the database well under a
second after its request ended, whatever the traffic), writes their rows in batches (at most one every GATHER
seconds), then acknowledges and deletes them.

While the database does not take a batch (unreachable, its disk full), the entries stay in the spool, read by
this process and unacknowledged: it tries them again after 1 s, then waiting twice as long each time up to
RETRY_MAX, and reads nothing new meanwhile. Every CLAIM_EVERY seconds it takes the entries another reader left
unacknowledged for request_spool.CLAIM_IDLE seconds (that reader died, or cannot write them either). Writing the
same entry twice is harmless (request_rows: one row per request id).
"""

import asyncio
import functools
import logging
import time

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError, ResponseError

from console.observability.request_rows import Row, write_rows
from console.observability.request_spool import (
    BATCH,
    CLAIM_IDLE,
    GROUP,
    Entry,
    is_missing_group,
    read_entries,
    rows_of,
    spool_key,
)
from gateway.database_thread import DatabaseThread

log = logging.getLogger(__name__)
BLOCK = 2.0  # seconds a read waits for new entries
GATHER = 0.25  # seconds after a batch before the next read: later rows gather into fewer, larger batches
RETRY_MAX = 10.0  # seconds at most between tries of a batch the database did not take
CLAIM_EVERY = 15.0  # seconds between looks for entries other readers left


class SpoolWriter:
    """The spool's reader ``consumer`` (the process's identity) of this process."""

    def __init__(self, consumer: str) -> None:
        self.consumer = consumer
        self.redis = aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=BLOCK + 5, socket_connect_timeout=2)
        self._database = DatabaseThread("hearth-requestlog")
        self._task: asyncio.Task[None] | None = None
        self._delay = 0.0

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop reading; what it read and did not acknowledge is left to the other readers (CLAIM_IDLE)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.redis.aclose()
        self._database.close()

    async def write_directly(self, rows: list[Row]) -> int:
        """Write ``rows`` to the database on this writer's thread (gateway.ledger, while Redis is away); the rows
        written. Raises what the driver raises."""
        return await self._database.run(functools.partial(write_rows, rows))

    async def _run(self) -> None:
        own, claimed_at = True, time.monotonic()  # its own unacknowledged entries first (a restart's, a retry's)
        while True:
            try:
                if own:
                    entries = await self._read("0", block=False)
                    own = bool(entries)
                elif time.monotonic() - claimed_at >= CLAIM_EVERY:
                    claimed_at = time.monotonic()
                    entries = await self._claim()
                else:
                    entries = await self._read(">", block=True)
                if entries:
                    await self._write(entries)
                    await asyncio.sleep(GATHER)
            except ResponseError as exc:
                own = True
                if is_missing_group(exc):  # a Redis flushed or restarted empty
                    await self._make_group()
                else:
                    await self._wait("Redis refuses the spool's reads", exc)
            except (RedisError, OSError) as exc:
                own = True
                await self._wait("Redis does not answer", exc)
            except Exception as exc:  # the database's errors, whichever driver: the entries stay for the next try
                own = True
                await self._wait("the database does not take request log rows", exc)

    async def _read(self, after: str, block: bool) -> list[Entry]:
        read = await self.redis.xreadgroup(
            GROUP, self.consumer, {spool_key(): after}, count=BATCH, block=int(BLOCK * 1000) if block else None
        )
        return read_entries(read)

    async def _claim(self) -> list[Entry]:
        found = await self.redis.xautoclaim(spool_key(), GROUP, self.consumer, int(CLAIM_IDLE * 1000), count=BATCH)
        return list(found[1])

    async def _make_group(self) -> None:
        try:
            await self.redis.xgroup_create(spool_key(), GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                await self._wait("Redis refuses the spool's group", exc)
        except (RedisError, OSError) as exc:
            await self._wait("Redis does not answer", exc)

    async def _write(self, entries: list[Entry]) -> None:
        ids, rows = rows_of(entries)
        await self._database.run(functools.partial(write_rows, rows))
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xack(spool_key(), GROUP, *ids)
            pipe.xdel(spool_key(), *ids)
            await pipe.execute()
        if self._delay:
            log.info("request log rows are written again")
        self._delay = 0.0

    async def _wait(self, what: str, exc: BaseException) -> None:
        if not self._delay:
            log.warning("%s (%s); the rows wait in the spool and are tried again", what, exc)
        self._delay = min(max(self._delay * 2, 1.0), RETRY_MAX)
        await asyncio.sleep(self._delay)
