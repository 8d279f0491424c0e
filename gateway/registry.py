"""The gateway's in-process view of keys and routes, so the hot path runs no DB query and no Redis call.

The console bumps Redis's ``hearth:routing-version`` after every key or deployment change commits. The
gateway does not read it per request: one connection per process asks Redis to announce every change
of that key (client-side caching in broadcasting mode: ``CLIENT TRACKING ON REDIRECT <itself> BCAST
PREFIX``, then ``SUBSCRIBE __redis__:invalidate``, as the RESP2 form in
https://redis.io/docs/latest/develop/reference/client-side-caching/ has it; Redis ≥ 6). Redis queues
the announcement before its answer to the console's INCR, so a request that starts after the change
reloads first. Tracking is per server, not per database: a bump in another database only costs a reload.

Without that connection (Redis down, or too old) a snapshot is served at most UNWATCHED_MAX_AGE seconds,
and the watch is retried every WATCH_RETRY seconds. With it, the snapshot is also reloaded in the
background every RELOAD_EVERY seconds, in case a change ever went by without a bump.
"""

import asyncio
import logging
import time
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from redis.exceptions import RedisError

from console.access.key_format import key_prefix, matches
from console.access.models import ApiKey
from console.deployments.models import Deployment, DeploymentState
from console.fanout import ROUTING_VERSION_KEY
from engines.launch import speaks_anthropic, speaks_responses
from gateway.quotas import Quota, quota_of

log = logging.getLogger(__name__)
RELOAD_EVERY = 30.0  # seconds between background reloads while watching; also pings the watch connection
UNWATCHED_MAX_AGE = 1.0  # seconds a snapshot is served while no invalidation watch is live
WATCH_RETRY = 1.0  # seconds between attempts to (re)open the watch
INVALIDATIONS = "__redis__:invalidate"  # the channel Redis announces tracked keys' changes on


@dataclass(frozen=True)
class Upstream:
    """One ready replica: where it listens and the per-launch key its engine demands."""

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
    """A live API key as the gateway needs it; ``allowed_models`` empty means every model."""

    id: int
    prefix: str
    key_hash: str
    allowed_models: frozenset[str]
    max_tokens_cap: int | None
    expires_at: float | None  # Unix seconds
    quota: Quota = field(default_factory=Quota)

    def allows(self, model: str) -> bool:
        return not self.allowed_models or model in self.allowed_models


@dataclass
class Snapshot:
    keys: dict[str, KeyEntry] = field(default_factory=dict)  # by public prefix
    routes: dict[str, Route] = field(default_factory=dict)  # ready models
    states: dict[str, str] = field(default_factory=dict)  # every deployed model → its state


def load_snapshot() -> Snapshot:
    snap = Snapshot()
    for key in ApiKey.objects.filter(revoked_at__isnull=True).select_related("owner__member"):
        expires = key.expires_at.timestamp() if key.expires_at else None
        quota = quota_of(key)
        snap.keys[key.prefix] = KeyEntry(
            key.pk, key.prefix, key.key_hash, frozenset(key.allowed_models), key.max_tokens_cap, expires, quota
        )
    for dep in Deployment.objects.prefetch_related("replicas"):
        snap.states[dep.served_model_name] = dep.state
        ready = [r for r in dep.replicas.all() if r.running and r.ready_at is not None]
        if dep.state == DeploymentState.READY and ready:
            upstreams = tuple(Upstream(r.pk, r.base_url, r.engine_api_key) for r in sorted(ready, key=lambda r: r.pk))
            created = int(min(r.ready_at for r in ready if r.ready_at).timestamp())
            snap.routes[dep.served_model_name] = Route(
                dep.served_model_name, upstreams, dep.max_model_len, created,
                speaks_anthropic(dep.engine, dep.extra_args), dep.max_tokens_cap,
                speaks_responses=speaks_responses(dep.engine, dep.extra_args), fit_max_tokens=dep.fit_max_tokens,
                deployment_id=dep.pk,
            )  # fmt: skip
    return snap


class Registry:
    """Keys and routes for one gateway process: ``current()`` answers from memory unless a change is known."""

    def __init__(self) -> None:
        self.snapshot = Snapshot()
        self._stale = True  # a change was announced (or nothing is loaded yet)
        self._loaded_at = -RELOAD_EVERY  # monotonic seconds at which the loaded snapshot's DB read began
        self._watching = False  # the invalidation watch is live
        self._watch: asyncio.Task[None] | None = None
        self._first_try = asyncio.Event()  # the watch was tried once, opened or not
        self._reload: asyncio.Future[None] | None = None
        self._redis: aioredis.Redis | None = None

    async def current(self) -> Snapshot:
        """The snapshot, after a reload when a change was announced since it was read.

        The first calls wait for one attempt at the invalidation watch; while it is not live, snapshots are
        at most UNWATCHED_MAX_AGE old. Concurrent callers share one reload, and a change announced while a
        reload runs makes them wait for the next one. Raises what the DB read raises.
        """
        if not self._first_try.is_set():
            if self._watch is None:
                self._watch = asyncio.ensure_future(self._keep_watching())
            await self._first_try.wait()
        while self._stale or (not self._watching and time.monotonic() - self._loaded_at > UNWATCHED_MAX_AGE):
            await asyncio.shield(self._reloading())
        return self.snapshot

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
        self._stale = False  # from here on, an announced change needs another reload
        began = time.monotonic()
        try:
            self.snapshot = await sync_to_async(load_snapshot)()
        except BaseException:
            self._stale = True
            raise
        self._loaded_at = began

    async def _keep_watching(self) -> None:
        """Mark the snapshot stale at every announced change; reopen the watch when it breaks."""
        while True:
            tracker = await _open_watch()
            self._first_try.set()
            if tracker is not None:
                self._watching, self._stale = True, True  # changes made while nobody listened
                try:
                    await self._listen(tracker)
                except (RedisError, OSError) as exc:
                    log.warning("routing invalidations from Redis stopped (%s); reopening", exc)
                finally:
                    self._watching = False
                    await tracker.aclose()
            await asyncio.sleep(WATCH_RETRY)

    async def _listen(self, tracker: aioredis.Redis) -> None:
        """Read announcements until the connection breaks. After RELOAD_EVERY quiet seconds, reload in the
        background and ping; no answer by the next quiet spell raises RedisError."""
        connection = tracker.connection
        assert connection is not None  # a single-connection client, connected by _open_watch
        pinged = False
        while True:
            message = await connection.read_response(timeout=RELOAD_EVERY)
            if message is None:
                if pinged:
                    raise RedisError(f"no answer to PING in {RELOAD_EVERY:.0f} s")
                self._reloading().add_done_callback(_log_failure)
                await connection.send_command("PING")
                pinged = True
            elif message[0] == b"message":  # [b"message", channel, [keys] or None after a flush]
                self._stale = True
            else:  # [b"pong", b""]
                pinged = False

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        if self._redis is not None:
            await self._redis.aclose()

    @staticmethod
    def authenticate(snapshot: Snapshot, key: str) -> KeyEntry | None:
        """The entry of ``key`` when it is live (not revoked, not expired), else None.

        The hash comparison is constant-time (console.access.key_format.matches).
        """
        entry = snapshot.keys.get(key_prefix(key))
        if entry is None or not matches(key, entry.key_hash):
            return None
        if entry.expires_at is not None and entry.expires_at <= time.time():
            return None
        return entry


async def _open_watch() -> aioredis.Redis | None:
    """A connection subscribed to the announcements of ROUTING_VERSION_KEY's changes, or None (logged)
    when Redis cannot give one."""
    tracker = aioredis.Redis.from_url(settings.REDIS_URL, protocol=2, single_connection_client=True)
    try:
        own_id = await tracker.client_id()
        await tracker.client_tracking_on(clientid=own_id, bcast=True, prefix=[ROUTING_VERSION_KEY])
        assert tracker.connection is not None  # a single-connection client connects at its first command
        await tracker.connection.send_command("SUBSCRIBE", INVALIDATIONS)
        await tracker.connection.read_response()
    except (RedisError, OSError) as exc:
        log.warning("no routing invalidations from Redis (%s); keys and routes are re-read every %.0f s",
                    exc, UNWATCHED_MAX_AGE)  # fmt: skip
        await tracker.aclose()
        return None
    return tracker


def _log_failure(reload: asyncio.Future[None]) -> None:
    if not reload.cancelled() and reload.exception() is not None:
        log.error("background reload of keys and routes failed", exc_info=reload.exception())
