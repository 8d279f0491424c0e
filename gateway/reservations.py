"""Limits and budgets held in Redis, shared by every gateway process: reserved at admission, settled at the end.

Admission is one Lua script (``ADMIT``; Redis runs a script atomically, so two processes never both take the
last place): it reads the deployment's USD per token (console.observability.cost.price_per_token), checks every
counter the key has a limit or budget on against what the request would add, and only when all of them have
room adds to all of them: one request, the reserved tokens, a concurrency slot (a sorted set of reservation
ids scored by when they lapse, SLOT_LAPSE s on, so a crashed process's slot frees itself), and the most the
reservation could cost to the key's and its owner's day and month USD counters. A refusal adds nothing.

Settlement (``SETTLE``) gives back what was reserved and not used: tokens reserved minus tokens used (prompt +
completion as the request log counts them; a cancelled request's count so far), the cost reserved minus the
cost of the tokens used at the price read at admission, and the slot. The request stays counted in its
minute. Each request is counted in the windows of the moment it was admitted. A key without any limit is
not admitted through Redis and holds nothing to settle: its cost, at the price this process has read
(gateway.prices), is added to its USD counters in batches (gateway.charges).

USD: counters in nano-USD; cost = tokens × USD per token, reserved rounded up and charged rounded to the
nearest nano-USD, and that charge is what the request log's ``cost_usd`` holds, so the day's counter is the
sum of the day's logged costs (plus what requests in flight hold). No price published (a CPU deployment, no
GPU price, no tokens measured yet): the budgets cannot be judged; the request passes, is charged nothing
and its log row's cost is None (the keys page says "no price").

Keys: ``hearth:<HEARTH_INSTANCE>:quota:key:<id>:…`` and ``…:quota:owner:<user id>:…`` (appliance.redis_keys),
so two appliances sharing one Redis never share counters.
"""

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from appliance.redis_keys import redis_key
from console.observability.cost import price_per_token
from gateway import quotas
from gateway.charges import Charges, nano_usd
from gateway.prices import Prices
from gateway.quotas import NANO, Quota

log = logging.getLogger(__name__)
SLOT_LAPSE = 3600  # seconds a concurrency slot is held at most (a process that died never gives it back)
REDIS_TIMEOUT = 1.0  # seconds to connect or answer before Redis counts as unreachable
OUTAGE_RETRY = 5  # seconds, the Retry-After of a 503 while Redis does not answer
TTL = {"minute": 120, "day": 2 * 86400, "month": 62 * 86400}  # seconds each window's counter outlives its start

# KEYS: 1 requests/minute, 2 tokens/minute, 3 tokens/day, 4 running (sorted set), 5 key USD/day, 6 key USD/month,
#       7 owner USD/day, 8 owner USD/month, 9 the deployment's USD per token.
# ARGV: 1 reservation id, 2 now (Unix s), 3 tokens to reserve, 4-11 the limits of KEYS 1-8 ('' none; USD in
#       nano-USD), 12 1 when the key has an owner, 13-15 TTL of minute, day and month counters, 16 SLOT_LAPSE.
# Returns {0, cost reserved (nano-USD), price ('' none)} or {index of the full counter (1-8), used, wanted}.
ADMIT = """
local now, tokens = tonumber(ARGV[2]), tonumber(ARGV[3])
local price = redis.call('GET', KEYS[9])
local cost = 0
if price then cost = math.ceil(tokens * tonumber(price) * 1e9) end
local adds = {1, tokens, tokens, 1, cost, cost, cost, cost}
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
for i = 1, 8 do
  local limit = ARGV[3 + i]
  if limit ~= '' and (i < 5 or price) then
    local used
    if i == 4 then used = redis.call('ZCARD', KEYS[4]) else used = tonumber(redis.call('GET', KEYS[i]) or '0') end
    if used + adds[i] > tonumber(limit) then return {i, used, string.format('%d', adds[i])} end
  end
end
local ttls = {ARGV[13], ARGV[13], ARGV[14], 0, ARGV[14], ARGV[15], ARGV[14], ARGV[15]}
local last = 6
if ARGV[12] == '1' then last = 8 end
for i = 1, last do
  if i == 4 then
    redis.call('ZADD', KEYS[4], now + tonumber(ARGV[16]), ARGV[1])
    redis.call('EXPIRE', KEYS[4], ARGV[16])
  elseif i < 4 or cost > 0 then
    redis.call('INCRBY', KEYS[i], string.format('%d', adds[i]))
    redis.call('EXPIRE', KEYS[i], ttls[i])
  end
end
return {0, string.format('%d', cost), price or ''}
"""

# KEYS: 1 tokens/minute, 2 tokens/day, 3 running, 4 key USD/day, 5 key USD/month, 6 owner USD/day,
#       7 owner USD/month, 8 the deployment's USD per token.
# ARGV: 1 reservation id ('' none: nothing was reserved), 2 tokens reserved, 3 tokens used, 4 cost reserved,
#       5 the price read at admission ('' none; '?' read it now), 6 1 when the key has an owner,
#       7-8 TTL of day and month counters.
# Returns {cost charged (nano-USD), price ('' none)}.
SETTLE = """
local reserved, used, reserved_cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local price = ARGV[5]
if price == '?' then price = redis.call('GET', KEYS[8]) or '' end
local cost = 0
if price ~= '' then cost = math.floor(used * tonumber(price) * 1e9 + 0.5) end
if ARGV[1] ~= '' then
  for i = 1, 2 do
    if used ~= reserved and redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('INCRBY', KEYS[i], string.format('%d', used - reserved))
    end
  end
  redis.call('ZREM', KEYS[3], ARGV[1])
end
local change = cost - reserved_cost
local last = 5
if ARGV[6] == '1' then last = 7 end
local ttls = {0, 0, 0, ARGV[7], ARGV[8], ARGV[7], ARGV[8]}
for i = 4, last do
  if change ~= 0 then
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('INCRBY', KEYS[i], string.format('%d', change))
    elseif change > 0 then
      redis.call('INCRBY', KEYS[i], string.format('%d', change))
      redis.call('EXPIRE', KEYS[i], ttls[i])
    end
  end
end
return {string.format('%d', cost), price}
"""


@dataclass(frozen=True)
class Reservation:
    """What one admitted request holds: its counters' names (KEYS of both scripts), id, tokens and cost."""

    keys: tuple[str, ...]
    rid: str
    tokens: int
    cost: int  # nano-USD
    price: str  # USD per token at admission, '' none
    owned: bool


def counter_keys(key_id: int, owner_id: int | None, deployment_id: int, now: float) -> tuple[str, ...]:
    """ADMIT's KEYS for a request admitted at ``now`` (Unix s)."""
    at = datetime.fromtimestamp(now, UTC)
    minute, day, month = int(now // 60), at.strftime("%Y%m%d"), at.strftime("%Y%m")
    mine, owner = redis_key(f"quota:key:{key_id}"), redis_key(f"quota:owner:{owner_id or 0}")
    return (f"{mine}:rpm:{minute}", f"{mine}:tpm:{minute}", f"{mine}:tpd:{day}", f"{mine}:running",
            f"{mine}:usd:{day}", f"{mine}:usd:{month}", f"{owner}:usd:{day}", f"{owner}:usd:{month}",
            price_per_token(deployment_id))  # fmt: skip


class Reservations:
    """One gateway process's client for the counters (its own pool, short timeouts and no retries: a
    reservation sent twice would be counted twice, and an outage should answer at once). ``prices`` is the
    process's price cache, which gateway.registry's watch keeps fresh."""

    def __init__(self, prices: Prices) -> None:
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.REDIS_URL, max_connections=64, timeout=5, socket_timeout=REDIS_TIMEOUT,
            socket_connect_timeout=REDIS_TIMEOUT, retry=Retry(NoBackoff(), 0),
        )  # fmt: skip
        self.redis = aioredis.Redis(connection_pool=pool)
        self._admit, self._settle = self.redis.register_script(ADMIT), self.redis.register_script(SETTLE)
        self.prices, self.charges = prices, Charges(self.redis)

    async def admit(self, key_id: int, quota: Quota, deployment_id: int, tokens: int) -> Reservation:
        """Reserve one request of ``tokens`` tokens (gateway.quotas.tokens_to_reserve). Raises GatewayError
        429 when a limit or budget has no room for it (nothing counted then), 503 when Redis does not answer."""
        now = time.time()
        keys = counter_keys(key_id, quota.owner_id, deployment_id, now)
        limits = [quota.requests_per_minute, quota.tokens_per_minute, quota.tokens_per_day, quota.max_concurrent,
                  *(None if b is None else quotas.to_nano(b) for b in quota.budgets())]  # fmt: skip
        rid, owned = uuid.uuid4().hex, quota.owner_id is not None
        args: list[str | int] = [rid, repr(now), tokens, *("" if v is None else v for v in limits), int(owned),
                TTL["minute"], TTL["day"], TTL["month"], SLOT_LAPSE]  # fmt: skip
        try:
            answer = await self._admit(keys=list(keys), args=args)
        except (RedisError, OSError) as exc:
            log.warning("quota store unreachable; key %s refused with 503 (%s)", key_id, exc)
            raise quotas.store_unreachable(OUTAGE_RETRY) from None
        index, first, second = int(answer[0]), answer[1], answer[2]
        if index:
            raise quotas.refusal(index - 1, int(limits[index - 1] or 0), int(first), int(second), now)
        price = second.decode() if isinstance(second, bytes) else str(second)
        return Reservation(keys, rid, tokens, int(first), price, owned)

    async def settle(
        self, held: Reservation | None, key_id: int, owner_id: int | None, deployment_id: int, used: int
    ) -> Decimal | None:
        """Settle ``held`` with the ``used`` tokens, or, for a key admitted without Redis (``held`` None),
        charge their cost (gateway.charges); the USD charged, None when no price was known or Redis did not
        answer (logged: a request already answered never fails here)."""
        if held is None:
            return await self._charge(key_id, owner_id, deployment_id, used)
        keys = held.keys[1:]
        ttls = [TTL["day"], TTL["month"]]
        args: list[str | int] = [held.rid, held.tokens, max(used, 0), held.cost, held.price, int(held.owned), *ttls]
        try:
            cost, price = await self._settle(keys=list(keys), args=args)
        except (RedisError, OSError) as exc:
            log.warning("quota store unreachable; a request of key %s was not settled (%s)", key_id, exc)
            return None
        return Decimal(int(cost)) / NANO if price else None

    async def _charge(self, key_id: int, owner_id: int | None, deployment_id: int, used: int) -> Decimal | None:
        if used <= 0:
            return None
        try:
            price = await self.prices.get(self.redis, deployment_id)
        except (RedisError, OSError) as exc:
            log.warning("quota store unreachable; a request of key %s was not charged (%s)", key_id, exc)
            return None
        if not price:
            return None
        cost = nano_usd(used, price)
        counters = counter_keys(key_id, owner_id, deployment_id, time.time())[4 : 8 if owner_id is not None else 6]
        self.charges.charge(counters, [TTL["day"], TTL["month"]] * (len(counters) // 2), cost)
        return Decimal(cost) / NANO

    async def close(self) -> None:
        await self.charges.close()
        await self.redis.aclose()
