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

The same watch follows the deployments' price keys (console.observability.cost.price_key_prefix) for the
process's price cache (gateway.prices): an announced price change empties it, and it is used only while the
watch is live.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import F
from redis.exceptions import RedisError

from console.access.key_format import key_prefix, matches
from console.access.models import ApiKey
from console.deployments.models import Deployment, DeploymentState, Replica
from console.fanout import routing_version_key
from console.observability.cost import price_key_prefix
from engines import external
from engines.launch import speaks_anthropic, speaks_responses
from gateway import errors
from gateway.errors import GatewayError
from gateway.prices import Prices
from gateway.quotas import Quota, quota_of

log = logging.getLogger(__name__)
RECHECK_EVERY = 2.0  # seconds between background re-reads of the database, whatever Redis announced
PING_EVERY = 30.0  # seconds of quiet on the watch connection before it is pinged (no answer by the next: broken)
UNWATCHED_MAX_AGE = 1.0  # seconds a snapshot is served while no announcement watch is live
WATCH_RETRY = 1.0  # seconds between attempts to (re)open the watch
INVALIDATIONS = "__redis__:invalidate"  # the channel Redis announces tracked keys' changes on
RECHECKED = {401, 403, 404, 503}  # refusals decided again on a snapshot read after the request arrived
T = TypeVar("T")


@dataclass(frozen=True)
class Upstream:
    """One ready replica: where it listens (``http://host:port``, or an external endpoint's base URL, which may be
    https and have a path) and the key its engine demands ("" for an external endpoint that demands none)."""

    replica_id: int
    base_url: str
    engine_api_key: str


@dataclass(frozen=True)
class Route:
    """Where a served model name goes: its ready replicas."""

    served_model_name: str
    upstreams: tuple[Upstream, ...]
    max_model_len: int
    created: int  # Unix seconds the deployment became ready, as OpenAI's model object has it
    speaks_anthropic: bool = True  # else the gateway translates /v1/messages to the chat API
    max_tokens_cap: int | None = None  # the deployment's own cap on generated tokens per request
    speaks_responses: bool = True  # else the gateway translates /v1/responses to the chat API
    fit_max_tokens: bool = False  # lower an output limit over the context left to what it leaves (context_fit)
    deployment_id: int = 0  # whose price per token the key's budgets are charged at (gateway.reservations)


@dataclass(frozen=True)
class KeyEntry:
    """One secret of a live API key as the gateway needs it; ``allowed_models`` empty means every model.

    A rotated key has two entries under its two prefixes, one key ``id`` (so one set of quotas): the
    current secret, and the previous one with ``grace_until`` set (console.access.models.ApiKey.secrets_at).
    """

    id: int
    prefix: str
    key_hash: str
    allowed_models: frozenset[str]
    max_tokens_cap: int | None
    expires_at: float | None  # Unix seconds
    quota: Quota = field(default_factory=Quota)
    grace_until: float | None = None  # Unix seconds: this is the previous secret, accepted until then
    revoked_at: float | None = None  # Unix seconds: the key was revoked then, and is refused saying so

    def allows(self, model: str) -> bool:
        return not self.allowed_models or model in self.allowed_models


@dataclass
class Snapshot:
    keys: dict[str, KeyEntry] = field(default_factory=dict)  # by public prefix, previous secrets' too
    routes: dict[str, Route] = field(default_factory=dict)  # ready models
    states: dict[str, str] = field(default_factory=dict)  # every deployed model → its state


def _seconds(at: datetime | None) -> float | None:
    return at.timestamp() if at is not None else None


def key_entries(key: ApiKey) -> list[KeyEntry]:
    """The entries of a key: its current secret, and its previous one while it has one (kept after its grace,
    so that its holder hears it was rotated rather than that it is wrong), each with when the key was revoked,
    if it was."""
    quota = quota_of(key)
    revoked = _seconds(key.revoked_at)
    current = KeyEntry(key.pk, key.prefix, key.key_hash, frozenset(key.allowed_models), key.max_tokens_cap,
                       _seconds(key.expires_at), quota, revoked_at=revoked)  # fmt: skip
    if not (key.previous_prefix and key.previous_key_hash and key.previous_valid_until):
        return [current]
    grace = key.previous_valid_until.timestamp()
    return [current, KeyEntry(key.pk, key.previous_prefix, key.previous_key_hash, current.allowed_models,
                              key.max_tokens_cap, current.expires_at, quota, grace_until=grace,
                              revoked_at=revoked)]  # fmt: skip


def load_snapshot() -> Snapshot:
    """Every key's secrets (a revoked key's too, to be refused as revoked) and every deployment's route or
    state, read from the database now."""
    snap = Snapshot()
    live_first = (F("revoked_at").asc(nulls_first=True), "pk")
    for key in ApiKey.objects.select_related("owner__member").order_by(*live_first):
        for entry in key_entries(key):
            snap.keys.setdefault(entry.prefix, entry)  # a current prefix wins over an old one's
    for dep in Deployment.objects.prefetch_related("replicas"):
        snap.states[dep.served_model_name] = dep.state
        ready = sorted((r for r in dep.replicas.all() if r.up), key=lambda r: r.pk)
        if dep.state == DeploymentState.READY and ready:
            upstreams = tuple(Upstream(r.pk, r.base_url, r.engine_api_key) for r in ready)
            created = int(min(r.ready_at for r in ready if r.ready_at).timestamp())
            snap.routes[dep.served_model_name] = Route(
                dep.served_model_name, upstreams, dep.max_model_len, created,
                all(_speaks(dep, r, anthropic=True) for r in ready), dep.max_tokens_cap,
                speaks_responses=all(_speaks(dep, r, anthropic=False) for r in ready),
                fit_max_tokens=dep.fit_max_tokens, deployment_id=dep.pk,
            )  # fmt: skip
    return snap


def authenticate(snapshot: Snapshot, key: str, now: float | None = None) -> KeyEntry:
    """The entry of ``key`` when it authenticates at ``now`` (Unix seconds, default the clock): a live key's
    current secret, or its previous one within the rotation's grace. The hash comparison is constant-time
    (console.access.key_format.matches). Raises GatewayError 401: an unknown or wrong key, a revoked one, an
    expired one, or a previous secret past its grace (the last three say so: only the key's holder can have
    sent it)."""
    entry = snapshot.keys.get(key_prefix(key))
    if entry is None or not matches(key, entry.key_hash):
        raise errors.invalid_key()
    if entry.revoked_at is not None:
        raise errors.revoked_key(_utc(entry.revoked_at))
    now = time.time() if now is None else now
    if entry.expires_at is not None and entry.expires_at <= now:
        raise errors.expired_key(_utc(entry.expires_at))
    if entry.grace_until is not None and entry.grace_until <= now:
        raise errors.rotated_key(_utc(entry.grace_until))
    return entry


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _speaks(dep: Deployment, replica: Replica, anthropic: bool) -> bool:
    """Whether ``replica`` serves /v1/messages (``anthropic``) or /v1/responses itself: a launched one as its
    deployment's engine does (engines.launch), an external endpoint as its kind and version do (engines.external).
    A route relays an API as it is only when every replica of it serves it; otherwise it translates for all."""
    if replica.external:
        check = external.speaks_anthropic if anthropic else external.speaks_responses
        return check(replica.engine_kind, replica.engine_version)
    return (speaks_anthropic if anthropic else speaks_responses)(dep.engine, dep.extra_args)


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
        self._redis: aioredis.Redis | None = None
        self._loads = ThreadPoolExecutor(1, thread_name_prefix="hearth-registry")  # one DB connection, its own

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

    async def check_database(self) -> None:
        """Ask the database for ``SELECT 1`` (on the thread that reads snapshots). Raises what the driver raises."""
        await sync_to_async(_select_one, thread_sensitive=False, executor=self._loads)()

    @property
    def redis(self) -> aioredis.Redis:
        """This process's Redis client (a bounded pool that waits for a free connection rather than failing)."""
        if self._redis is None:
            pool = aioredis.BlockingConnectionPool.from_url(settings.REDIS_URL, max_connections=32, timeout=5)
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
            snapshot = await sync_to_async(_load_on_own_thread, thread_sensitive=False, executor=self._loads)()
        except Exception as exc:
            log.warning("keys and routes could not be read from the database: %s", exc)
            raise
        self.snapshot, self._loaded_at = snapshot, began

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

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._redis is not None:
            await self._redis.aclose()
        self._loads.shutdown(wait=False)


def _load_on_own_thread() -> Snapshot:
    close_old_connections()  # a connection the database dropped (a restart) is replaced, not reused
    return load_snapshot()


def _select_one() -> None:
    close_old_connections()
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
        log.warning("no routing announcements from Redis (%s); keys and routes are re-read every %.0f s",
                    exc, UNWATCHED_MAX_AGE)  # fmt: skip
        await tracker.aclose()
        return None
    return tracker
