"""The gateway's in-process view of keys and routes, so the hot path runs no DB query.

Reloaded from the database when Redis's ``hearth:routing-version`` changes (the console bumps it on
every key or deployment change) and at least every RELOAD_EVERY seconds in case a bump was missed.
"""

import asyncio
import time
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings

from console.models import ApiKey, Deployment, DeploymentState
from console.services import ROUTING_VERSION_KEY
from engines.launch import speaks_anthropic
from gateway.keys import key_prefix, matches
from gateway.quotas import Quota

RELOAD_EVERY = 30.0  # seconds


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
    for key in ApiKey.objects.filter(revoked_at__isnull=True):
        expires = key.expires_at.timestamp() if key.expires_at else None
        quota = Quota(key.requests_per_minute, key.tokens_per_minute, key.tokens_per_day, key.max_concurrent)
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
            )  # fmt: skip
    return snap


class Registry:
    def __init__(self) -> None:
        self.snapshot = Snapshot()
        self._version: bytes | str | None = None
        self._loaded_at = 0.0
        self._redis: aioredis.Redis | None = None
        self._check: asyncio.Future[None] | None = None

    async def current(self) -> Snapshot:
        """The snapshot, reloaded first if Redis says keys or routes changed.

        Concurrent requests share one version check in flight (a burst of hundreds would otherwise open
        as many Redis connections); a request that starts after a change commits still sees it.
        """
        if self._check is None or self._check.done():
            self._check = asyncio.ensure_future(self._refresh())
        await asyncio.shield(self._check)
        return self.snapshot

    @property
    def redis(self) -> aioredis.Redis:
        """This process's Redis client (a bounded pool that waits for a free connection rather than failing)."""
        if self._redis is None:
            pool = aioredis.BlockingConnectionPool.from_url(settings.REDIS_URL, max_connections=32, timeout=5)
            self._redis = aioredis.Redis(connection_pool=pool)
        return self._redis

    async def _refresh(self) -> None:
        version = await self.redis.get(ROUTING_VERSION_KEY)
        if version != self._version or time.monotonic() - self._loaded_at > RELOAD_EVERY:
            self.snapshot = await sync_to_async(load_snapshot)()
            self._version, self._loaded_at = version, time.monotonic()

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()

    @staticmethod
    def authenticate(snapshot: Snapshot, key: str) -> KeyEntry | None:
        """The entry of ``key`` when it is live (not revoked, not expired), else None.

        The hash comparison is constant-time (gateway.keys.matches).
        """
        entry = snapshot.keys.get(key_prefix(key))
        if entry is None or not matches(key, entry.key_hash):
            return None
        if entry.expires_at is not None and entry.expires_at <= time.time():
            return None
        return entry
