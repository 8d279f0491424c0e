"""The gateway's in-process view of keys and routes, so the hot path runs no DB query and no Redis call.

Freshness, in the order the console's changes reach a gateway process:

- **Announced changes.** The console bumps ``hearth:<instance>:routing-version`` after every key or
  deployment change commits (console.fanout, which retries until Redis takes it). One connection per
  process asks Redis to announce every change of that key (client-side caching in broadcasting mode:
  ``CLIENT TRACKING ON REDIRECT <itself> BCAST PREFIX``, then ``SUBSCRIBE __redis__:invalidate``, as the
  RESP2 form in https://redis.io/docs/latest/develop/reference/client-side-caching/ has it; Redis ≥ 6).
  An announcement marks the time it was read; a request that starts after it waits for a reload whose
  DB read began after it (never the previous snapshot, nor a reload already under way), and concurrent
  requests share that reload. Each request first yields once to the event loop, so an announcement that
  arrived with it is read before it is answered.
- **Refusals re-checked.** A request the snapshot would refuse (no such key, expired, rotated out, an
  unknown, forbidden or not-ready model) is decided again on a snapshot read after the request arrived,
  so a key or deployment whose change committed just before it is never refused for want of the news.
  Concurrent refusals share one reload; a flood of bad keys costs one reload at a time, never one each.
- **Lost announcements.** Every RECHECK_EVERY seconds the snapshot is re-read in the background, so no
  lost message keeps a revoked key alive longer; while the announcement watch is down (Redis away) a
  request is never answered from a snapshot older than UNWATCHED_MAX_AGE, and the watch is reopened
  every WATCH_RETRY seconds (reopening counts as a change: it may have missed some).
- **Per request.** Expiry and a rotation's grace end are checked against the clock on every request.
- **Waiting for a change.** A request held for a deployment's wake (gateway.holding) waits on
  ``changed_since``: every announced change and every reload wakes it, and it reads the snapshot again (so all
  the requests held for one deployment see it ready at the same reload); it polls nothing of its own.

What a snapshot holds: gateway.snapshot.

The same watch follows the deployments' price keys (console.observability.cost.price_key_prefix) for the
process's price cache (gateway.prices): an announced price change empties it, and it is used only while the
watch is live.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TypeVar

import redis.asyncio as aioredis
from django.conf import settings
from django.db import connection
from redis.driver_info import DriverInfo
from redis.exceptions import RedisError

from console.fanout import routing_version_key
from console.observability.cost import price_key_prefix
from gateway import errors
from gateway.database_thread import DatabaseThread
from gateway.errors import GatewayError
from gateway.prices import Prices
from gateway.snapshot import KeyEntry, Route, Snapshot, Upstream, authenticate, key_entries, load_snapshot

__all__ = ["KeyEntry", "Registry", "Route", "Snapshot", "Upstream", "authenticate", "key_entries", "load_snapshot"]

log = logging.getLogger(__name__)
RECHECK_EVERY = 2.0  # seconds between background re-reads of the database, whatever Redis announced
PING_EVERY = 30.0  # seconds of quiet on the watch connection before it is pinged (no answer by the next: broken)
UNWATCHED_MAX_AGE = 1.0  # seconds a snapshot is served while no announcement watch is live
WATCH_RETRY = 1.0  # seconds between attempts to (re)open the watch
INVALIDATIONS = "__redis__:invalidate"  # the channel Redis announces tracked keys' changes on
RECHECKED = {401, 403, 404, 503}  # refusals decided again on a snapshot read after the request arrived
T = TypeVar("T")


class Registry:
    """Keys and routes for one gateway process (the module docstring says how fresh they are); its watch also
    keeps ``prices`` fresh."""

    def __init__(self, prices: Prices | None = None) -> None:
        self.prices = prices or Prices()
        self.snapshot = Snapshot()
        self._loaded_at = float("-inf")  # monotonic seconds at which the served snapshot's DB read began
        self._changed_at = float("-inf")  # monotonic seconds at which the last announcement was read
        self._watching = False  # the announcement watch is live
        self._tasks: list[asyncio.Task[None]] = []
        self._reload: asyncio.Future[None] | None = None
        self._generation = 0  # counts the reloads and announced changes, for ``changed_since``
        self._bumped = asyncio.Event()  # set (and replaced) at each of them
        self._redis: aioredis.Redis | None = None
        self._loads = DatabaseThread("hearth-registry")

    @property
    def loaded(self) -> bool:
        """A snapshot was read from the database at least once."""
        return self._loaded_at > float("-inf")

    async def current(self) -> Snapshot:
        """The snapshot, after a reload when a change was announced since it was read (or, while no watch is
        live, when it is older than UNWATCHED_MAX_AGE). Raises GatewayError 503 when the database cannot be
        read and a reload is needed."""
        if not self._tasks:
            self._tasks = [asyncio.ensure_future(self._keep_watching()), asyncio.ensure_future(self._keep_rechecking())]
        await asyncio.sleep(0)  # let the watch read an announcement that came in with this request
        need = self._changed_at
        if not self._watching:
            need = max(need, time.monotonic() - UNWATCHED_MAX_AGE)
        return await self._read_after(need)

    async def fresh(self, since: float) -> Snapshot:
        """A snapshot whose DB read began after ``since`` (monotonic seconds). Raises GatewayError 503 when
        the database cannot be read."""
        return await self._read_after(since)

    async def resolve(self, arrived: float, decide: Callable[[Snapshot], T]) -> T:
        """``decide`` on the current snapshot; when it refuses (GatewayError with a status in RECHECKED) and
        the snapshot was read before the request ``arrived`` (monotonic seconds), decide again on one read
        after. Raises what ``decide`` raises the last time."""
        snapshot = await self.current()
        try:
            return decide(snapshot)
        except GatewayError as exc:
            if exc.status not in RECHECKED or self._loaded_at > arrived:
                raise
        return decide(await self.fresh(arrived))

    async def _read_after(self, need: float) -> Snapshot:
        while self._loaded_at <= need:
            try:
                await asyncio.shield(self._reloading())
            except Exception:  # logged by _load
                raise errors.registry_unavailable() from None
        return self.snapshot

    @property
    def generation(self) -> int:
        """How many reloads and announced changes this registry has seen: read it before a snapshot, and give
        it to ``changed_since``."""
        return self._generation

    async def changed_since(self, generation: int, timeout: float) -> None:
        """Return as soon as a reload or an announced change came after ``generation`` (at once when one came
        already), or after ``timeout`` seconds."""
        if self._generation != generation or timeout <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._bumped.wait(), timeout)

    def _bump(self) -> None:
        self._generation += 1
        self._bumped.set()
        self._bumped = asyncio.Event()

    async def check_database(self) -> None:
        """Ask the database for ``SELECT 1`` (on the thread that reads snapshots). Raises what the driver raises."""
        await self._loads.run(_select_one)

    @property
    def redis(self) -> aioredis.Redis:
        """This process's Redis client (a bounded pool that waits for a free connection rather than failing)."""
        if self._redis is None:
            pool = aioredis.BlockingConnectionPool.from_url(
                settings.REDIS_URL,
                max_connections=32,
                timeout=5,
                driver_info=DriverInfo(),  # read once (reservations)
            )
            self._redis = aioredis.Redis(connection_pool=pool)
        return self._redis

    def _reloading(self) -> asyncio.Future[None]:
        """The reload in flight, or a new one."""
        if self._reload is None or self._reload.done():
            self._reload = asyncio.ensure_future(self._load())
        return self._reload

    async def _load(self) -> None:
        began = time.monotonic()
        try:
            snapshot = await self._loads.run(load_snapshot)
        except Exception as exc:
            log.warning("keys and routes could not be read from the database: %s", exc)
            raise
        self.snapshot, self._loaded_at = snapshot, began
        self._bump()

    async def _keep_rechecking(self) -> None:
        """Re-read the database every RECHECK_EVERY seconds, whatever Redis announced or failed to."""
        while True:
            await asyncio.sleep(RECHECK_EVERY)
            with contextlib.suppress(Exception):  # logged by _load; requests needing a reload answer 503 meanwhile
                await asyncio.shield(self._reloading())

    async def _keep_watching(self) -> None:
        """Note every announced change; reopen the watch when it breaks."""
        while True:
            tracker = await _open_watch()
            if tracker is not None:
                self._watching, self._changed_at = True, time.monotonic()  # changes made while nobody listened
                self._bump()
                self.prices.forget()
                self.prices.live = True
                try:
                    await self._listen(tracker)
                except (RedisError, OSError) as exc:
                    log.warning("routing announcements from Redis stopped (%s); reopening", exc)
                finally:
                    self._watching = self.prices.live = False
                    await tracker.aclose()
            await asyncio.sleep(WATCH_RETRY)

    async def _listen(self, tracker: aioredis.Redis) -> None:
        """Read announcements until the connection breaks. After PING_EVERY quiet seconds, ping; no answer by
        the next quiet spell raises RedisError."""
        connection = tracker.connection
        assert connection is not None  # a single-connection client, connected by _open_watch
        pinged = False
        while True:
            message = await connection.read_response(timeout=PING_EVERY)
            if message is None:
                if pinged:
                    raise RedisError(f"no answer to PING in {PING_EVERY:.0f} s")
                await connection.send_command("PING")
                pinged = True
            elif message[0] == b"message":  # [b"message", channel, [keys] or None after a flush]
                self._announced(message[2])
            else:  # [b"pong", b""]
                pinged = False

    def _announced(self, keys: list[bytes] | None) -> None:
        """Redis announced that ``keys`` changed (None: all of them, a flush)."""
        prices = price_key_prefix().encode()
        if keys is None or any(k.startswith(prices) for k in keys):
            self.prices.forget()
        if keys is None or any(not k.startswith(prices) for k in keys):
            self._changed_at = time.monotonic()
            self._bump()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._redis is not None:
            await self._redis.aclose()
        self._loads.close()


def _select_one() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


async def _open_watch() -> aioredis.Redis | None:
    """A connection subscribed to the announcements of the routing version's changes and the price keys', or
    None (logged) when Redis cannot give one within WATCH_RETRY seconds."""
    tracker = aioredis.Redis.from_url(
        settings.REDIS_URL, protocol=2, single_connection_client=True, socket_connect_timeout=WATCH_RETRY
    )
    try:
        own_id = await tracker.client_id()
        prefixes = [routing_version_key(), price_key_prefix()]
        await tracker.client_tracking_on(clientid=own_id, bcast=True, prefix=prefixes)
        assert tracker.connection is not None  # a single-connection client connects at its first command
        await tracker.connection.send_command("SUBSCRIBE", INVALIDATIONS)
        await tracker.connection.read_response(timeout=WATCH_RETRY)
    except (RedisError, OSError) as exc:
        log.warning(
            "no routing announcements from Redis (%s); keys and routes are re-read every %.0f s", exc, UNWATCHED_MAX_AGE
        )
        await tracker.aclose()
        return None
    return tracker
