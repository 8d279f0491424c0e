"""Per-key quotas, counted in Redis so every gateway process shares them.

- requests per minute and tokens per minute: fixed one-minute windows;
- tokens per day: a UTC-day window; tokens are counted when a request ends (prompt + completion), so a
  request that starts under the limit may finish over it;
- requests at once: a counter taken before the relay and given back after it.
A refusal is a 429 with ``Retry-After`` (seconds until the window turns, or 1 for concurrency).
"""

import time
from dataclasses import dataclass

import redis.asyncio as aioredis

from appliance.redis_keys import redis_key
from gateway.errors import GatewayError

SAFETY_TTL = 3600  # seconds: a concurrency slot a crashed process never gave back expires


@dataclass(frozen=True)
class Quota:
    """A key's limits; None means unlimited."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None
    max_concurrent: int | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.requests_per_minute, self.tokens_per_minute, self.tokens_per_day,
                                            self.max_concurrent))  # fmt: skip


def _windows(key_id: int, now: float) -> tuple[str, str, str, int, int]:
    minute, day = int(now // 60), int(now // 86400)
    base = redis_key(f"q:{key_id}")
    return (f"{base}:rpm:{minute}", f"{base}:tpm:{minute}", f"{base}:tpd:{day}",
            60 - int(now % 60), 86400 - int(now % 86400))  # fmt: skip


def _over(what: str, limit: int, retry_after: int) -> GatewayError:
    return GatewayError(429, f"This API key's limit of {limit:,} {what} is reached; retry in {retry_after} s.",
                        type="rate_limit_error", code="rate_limit_exceeded", retry_after=retry_after)  # fmt: skip


async def admit(r: aioredis.Redis, key_id: int, quota: Quota) -> bool:
    """Count one request against ``quota``; True when a concurrency slot was taken (give it back with
    ``release``). Raises GatewayError 429 when a limit is reached (nothing stays counted then)."""
    rpm_key, tpm_key, tpd_key, to_minute, to_day = _windows(key_id, time.time())
    async with r.pipeline(transaction=False) as pipe:
        pipe.incr(rpm_key)
        pipe.expire(rpm_key, 120)
        pipe.get(tpm_key)
        pipe.get(tpd_key)
        requests, _, minute_tokens, day_tokens = await pipe.execute()
    if quota.requests_per_minute is not None and int(requests) > quota.requests_per_minute:
        raise _over("requests per minute", quota.requests_per_minute, to_minute)
    if quota.tokens_per_minute is not None and int(minute_tokens or 0) >= quota.tokens_per_minute:
        raise _over("tokens per minute", quota.tokens_per_minute, to_minute)
    if quota.tokens_per_day is not None and int(day_tokens or 0) >= quota.tokens_per_day:
        raise _over("tokens per day", quota.tokens_per_day, to_day)
    if quota.max_concurrent is None:
        return False
    slot = redis_key(f"q:{key_id}:concurrent")
    if await r.incr(slot) > quota.max_concurrent:
        await r.decr(slot)
        raise _over("requests at once", quota.max_concurrent, 1)
    await r.expire(slot, SAFETY_TTL)
    return True


async def release(r: aioredis.Redis, key_id: int) -> None:
    await r.decr(redis_key(f"q:{key_id}:concurrent"))


async def spend(r: aioredis.Redis, key_id: int, tokens: int) -> None:
    """Count a finished request's tokens in the minute and day windows."""
    if tokens <= 0:
        return
    _, tpm_key, tpd_key, _, _ = _windows(key_id, time.time())
    async with r.pipeline(transaction=False) as pipe:
        pipe.incrby(tpm_key, tokens)
        pipe.expire(tpm_key, 120)
        pipe.incrby(tpd_key, tokens)
        pipe.expire(tpd_key, 2 * 86400)
        await pipe.execute()
