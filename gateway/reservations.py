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

USD: counters in nano-USD; cost = tokens × USD per token (the deployment's steady price,
console.observability.pricing, times HEARTH_BATCH_PRICE_FACTOR for a batch-class request: gateway.prices.scaled; a
price "input,output" reserves and charges the prompt tokens at the first, the rest at the second), reserved
rounded up and charged rounded to the nearest nano-USD, and that charge is what the request log's ``cost_usd``
holds, so the day's counter is the sum of the day's logged costs (plus what requests in flight hold).
No price published (a CPU deployment or no GPU price, and none set by an admin): the budgets cannot be judged; the
request passes, is charged nothing and its log row's cost is None (the keys page says "no price").

Keys: ``hearth:<HEARTH_INSTANCE>:quota:key:<id>:…`` and ``…:quota:owner:<user id>:…`` (appliance.redis_keys;
the USD counters' names in console.observability.spent, which beat's accounting check reads them by), so two
appliances sharing one Redis never share counters.

Each request is noted (gateway.ledger): admission writes a noted request's note in the same script, with what it
reserved; ``FINISH`` (gateway.finishes, with the settlement of this module's ``SETTLE_FUNCTION``) ends it: it
removes the note, settles what was reserved, and adds the request's log row to
the spool (console.observability.request_spool), all at once, and does nothing when the note is gone already
(another process recorded the request when its relay's process died).

Both scripts also keep the deployment's activity for its idle policy (console.deployments.activity: the last
request's time, the requests in flight): admission adds the request to its deployment's in-flight set, FINISH
takes it out (even when its note is gone), so neither costs a round trip of its own.
"""

import json
import logging
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.driver_info import DriverInfo
from redis.exceptions import RedisError

from console.deployments import activity
from console.observability.cost import price_per_token
from console.observability.spent import DAY_TTL, MONTH_TTL, key_counters, periods, usd_counters
from gateway import quotas
from gateway.charges import Charges, nano_usd
from gateway.prices import SCALE_FUNCTION, Prices, scaled
from gateway.quotas import NANO, Quota

log = logging.getLogger(__name__)
SLOT_LAPSE = 3600  # seconds a concurrency slot is held at most (a process that died never gives it back)
REDIS_TIMEOUT = 1.0  # seconds to connect or answer before Redis counts as unreachable
OUTAGE_RETRY = 5  # seconds, the Retry-After of a 503 while Redis does not answer
TTL = {"minute": 120, "day": DAY_TTL, "month": MONTH_TTL}  # seconds each window's counter outlives its start

# KEYS: 1 requests/minute, 2 tokens/minute, 3 tokens/day, 4 running (sorted set), 5 key USD/day, 6 key USD/month,
#       7 owner USD/day, 8 owner USD/month, 9 the deployment's USD per token, 10 the process's notes,
#       11 the deployment's last-request key, 12 its in-flight set (console.deployments.activity).
# ARGV: 1 reservation id (the request's id), 2 now (Unix s), 3 tokens to reserve, 4-11 the limits of KEYS 1-8 (''
#       none; USD in nano-USD), 12 1 when the key has an owner, 13-15 TTL of minute, day and month counters,
#       16 SLOT_LAPSE, 17 the request's note (a JSON object; '' none): written with "held": [cost, price] added,
#       18 activity.KEPT and 19 activity.LAPSE ('' both: the activity is not noted), 20 the price factor
#       (gateway.prices.price_factor; '' or absent 1): the price is read times it, and returned so; 21 the prompt's
#       part of the tokens (absent 0), priced at the input price where the price is "input,output".
# Returns {0, cost reserved (nano-USD), price ('' none), requests this minute, tokens this minute, tokens today (the
# last three with this request's)} or {index of the full counter (1-8), used, wanted, the same three counters without
# this request, the least it may cost: its prompt and one output token (nano-USD; 0 without a price)}.
# What ``tokens`` cost in USD at ``price`` (a number, or "input,output" where the ``prompt`` tokens among them cost the
# first and the rest the second, console.observability.pricing); ADMIT rounds it up, ``settle`` to the nearest.
PRICED_FUNCTION = """
local function priced(price, tokens, prompt)
  local first, second = string.match(price, '^([^,]+),(.+)$')
  if not first then return tokens * tonumber(price) end
  prompt = math.min(prompt, tokens)
  return prompt * tonumber(first) + (tokens - prompt) * tonumber(second)
end
"""
ADMIT = (
    SCALE_FUNCTION
    + PRICED_FUNCTION
    + """
local now, tokens = tonumber(ARGV[2]), tonumber(ARGV[3])
local price = redis.call('GET', KEYS[9])
if price then price = scaled(price, tonumber(ARGV[20] or '1')) end
local cost = 0
if price then cost = math.ceil(priced(price, tokens, tonumber(ARGV[21] or '0')) * 1e9) end
local adds = {1, tokens, tokens, 1, cost, cost, cost, cost}
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
for i = 1, 8 do
  local limit = ARGV[3 + i]
  if limit ~= '' and (i < 5 or price) then
    local used
    if i == 4 then used = redis.call('ZCARD', KEYS[4]) else used = tonumber(redis.call('GET', KEYS[i]) or '0') end
    if used + adds[i] > tonumber(limit) then
      local c = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])
      local rpm, tpm, tpd = tonumber(c[1] or '0'), tonumber(c[2] or '0'), tonumber(c[3] or '0')
      local prompt, least = tonumber(ARGV[21] or '0'), 0
      if price then least = math.ceil(priced(price, prompt + 1, prompt) * 1e9) end
      return {i, used, string.format('%d', adds[i]), rpm, tpm, tpd, string.format('%d', least)}
    end
  end
end
local ttls = {ARGV[13], ARGV[13], ARGV[14], 0, ARGV[14], ARGV[15], ARGV[14], ARGV[15]}
local last = 6
if ARGV[12] == '1' then last = 8 end
local counted = {0, 0, 0}
for i = 1, last do
  if i == 4 then
    redis.call('ZADD', KEYS[4], now + tonumber(ARGV[16]), ARGV[1])
    redis.call('EXPIRE', KEYS[4], ARGV[16])
  elseif i < 4 or cost > 0 then
    local after = redis.call('INCRBY', KEYS[i], string.format('%d', adds[i]))
    if i < 4 then counted[i] = after end
    redis.call('EXPIRE', KEYS[i], ttls[i])
  end
end
if ARGV[17] ~= '' then
  local held = string.format(',"held":["%d","%s"]}', cost, price or '')
  redis.call('HSET', KEYS[10], ARGV[1], string.sub(ARGV[17], 1, -2) .. held)
end
if ARGV[18] and ARGV[18] ~= '' then
  redis.call('SET', KEYS[11], ARGV[2], 'EX', ARGV[18])
  redis.call('ZADD', KEYS[12], now + tonumber(ARGV[19]), ARGV[1])
  redis.call('EXPIRE', KEYS[12], ARGV[19])
end
return {0, string.format('%d', cost), price or '', counted[1], counted[2], counted[3]}
"""
)

# The settlement, as a Lua function of its KEYS (K) and ARGV (A):
# K: 1 tokens/minute, 2 tokens/day, 3 running, 4 key USD/day, 5 key USD/month, 6 owner USD/day,
#    7 owner USD/month, 8 the deployment's USD per token.
# A: 1 reservation id ('' none: nothing was reserved), 2 tokens reserved, 3 tokens used, 4 cost reserved,
#    5 the price read at admission ('' none; '?' read it now), 6 1 when the key has an owner,
#    7-8 TTL of day and month counters, 9 the prompt tokens among those used (charged at the input price),
#    10 the price factor a price read now ('?') is scaled by ('' or absent 1; a price read at admission is already).
# Returns {cost charged (nano-USD), price ('' none)}. A price "input,output" charges the prompt tokens at the first,
# the rest at the second (console.observability.pricing); gateway.charges.nano_usd rounds the same way.
SETTLE_FUNCTION = (
    SCALE_FUNCTION
    + PRICED_FUNCTION
    + """
local function settle(K, A)
  local reserved, used, reserved_cost = tonumber(A[2]), tonumber(A[3]), tonumber(A[4])
  local price = A[5]
  if price == '?' then price = scaled(redis.call('GET', K[8]) or '', tonumber(A[10] or '1')) end
  local cost = 0
  if price ~= '' then cost = math.floor(priced(price, used, tonumber(A[9] or '0')) * 1e9 + 0.5) end
  if A[1] ~= '' then
    for i = 1, 2 do
      if used ~= reserved and redis.call('EXISTS', K[i]) == 1 then
        redis.call('INCRBY', K[i], string.format('%d', used - reserved))
      end
    end
    redis.call('ZREM', K[3], A[1])
  end
  local change = cost - reserved_cost
  local last = 5
  if A[6] == '1' then last = 7 end
  local ttls = {0, 0, 0, A[7], A[8], A[7], A[8]}
  for i = 4, last do
    if change ~= 0 then
      if redis.call('EXISTS', K[i]) == 1 then
        redis.call('INCRBY', K[i], string.format('%d', change))
      elseif change > 0 then
        redis.call('INCRBY', K[i], string.format('%d', change))
        redis.call('EXPIRE', K[i], ttls[i])
      end
    end
  end
  return {string.format('%d', cost), price}
end
"""
)
SETTLE = SETTLE_FUNCTION + "return settle(KEYS, ARGV)\n"  # KEYS and ARGV as K and A above


@dataclass(frozen=True)
class Reservation:
    """What one admitted request holds: its counters' names (KEYS of both scripts), id, tokens and cost."""

    keys: tuple[str, ...]
    rid: str
    tokens: int
    cost: int  # nano-USD
    price: str  # USD per token at admission, '' none
    owned: bool
    counted: tuple[int, int, int] = (
        0,
        0,
        0,
    )  # the key's requests this minute, tokens this minute and today, its own in


def running_key(key_id: int) -> str:
    """The sorted set of a key's concurrency slots: its admitted requests' ids, scored by when each lapses."""
    return f"{key_counters(key_id)}:running"


def counter_keys(key_id: int, owner_id: int | None, deployment_id: int, now: float) -> tuple[str, ...]:
    """ADMIT's KEYS 1-9 for a request admitted at ``now`` (Unix s)."""
    minute, (day, _) = int(now // 60), periods(now)
    mine = key_counters(key_id)
    return (
        f"{mine}:rpm:{minute}",
        f"{mine}:tpm:{minute}",
        f"{mine}:tpd:{day}",
        running_key(key_id),
        *usd_counters(key_id, owner_id, now),
        price_per_token(deployment_id),
    )


def settlement(
    keys: tuple[str, ...],
    rid: str,
    reserved: int,
    used: int,
    cost: int,
    price: str,
    owned: bool,
    prompt: int = 0,
    factor: float = 1.0,
) -> tuple[list[str], list[str | int]]:
    """The settlement's K and A (SETTLE, FINISH) for a request admitted with ADMIT's ``keys``: ``rid`` '' when
    nothing was reserved, ``price`` '?' to read it in the script (times ``factor``), ``prompt`` the prompt tokens."""
    args: list[str | int] = [rid, reserved, max(used, 0), cost, price, int(owned), TTL["day"], TTL["month"]]
    args += [max(prompt, 0), repr(factor)]
    return list(keys[1:]), args


class Reservations:
    """One gateway process's client for the counters (its own pool, short timeouts and no retries: a
    reservation sent twice would be counted twice, and an outage should answer at once). ``prices`` is the
    process's price cache, which gateway.registry's watch keeps fresh."""

    def __init__(self, prices: Prices) -> None:
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.REDIS_URL,
            max_connections=64,
            timeout=5,
            socket_timeout=REDIS_TIMEOUT,
            socket_connect_timeout=REDIS_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
            driver_info=DriverInfo(),  # read once: each connection read redis-py's version from package metadata
        )
        self.redis = aioredis.Redis(connection_pool=pool)
        self._admit, self._settle = self.redis.register_script(ADMIT), self.redis.register_script(SETTLE)
        self.prices, self.charges = prices, Charges(self.redis)

    async def admit(
        self,
        key_id: int,
        quota: Quota,
        deployment_id: int,
        tokens: int,
        rid: str = "",
        note: tuple[str, dict[str, Any]] | None = None,
        factor: float = 1.0,
        prompt: int = 0,
    ) -> Reservation:
        """Reserve one request of ``tokens`` tokens (gateway.quotas.tokens_to_reserve), ``prompt`` of them its
        prompt's, under the id ``rid`` (a new one when ''), at the deployment's price times ``factor``
        (gateway.prices.price_factor; a price "input,output" costs the prompt at the first); with ``note``
        (the process's notes hash, the note's fields), note the request too, its fields with ``admitted`` (Unix s),
        ``reserve`` and ``owned`` added; the request is in the deployment's requests in flight once admitted
        (console.deployments.activity). Raises GatewayError 429 when a limit or budget has no room for it (nothing
        counted or noted then), 503 when Redis does not answer."""
        now = time.time()
        keys = counter_keys(key_id, quota.owner_id, deployment_id, now)
        limits = [
            quota.requests_per_minute,
            quota.tokens_per_minute,
            quota.tokens_per_day,
            quota.max_concurrent,
            *(None if b is None else quotas.to_nano(b) for b in quota.budgets()),
        ]
        rid, owned = rid or uuid.uuid4().hex, quota.owner_id is not None
        if note is not None:
            note[1].update(admitted=now, reserve=tokens, owned=owned)
        noted = "" if note is None else json.dumps(note[1])
        args: list[str | int] = [
            rid,
            repr(now),
            tokens,
            *("" if v is None else v for v in limits),
            int(owned),
            TTL["minute"],
            TTL["day"],
            TTL["month"],
            SLOT_LAPSE,
            noted,
            activity.KEPT,
            activity.LAPSE,
            repr(factor),
            min(max(prompt, 0), tokens),
        ]
        busy = [activity.last_request_key(deployment_id), activity.in_flight_key(deployment_id)]
        try:
            notes = note[0] if note else keys[3]  # KEYS 10, untouched without a note
            answer = await self._admit(keys=[*keys, notes, *busy], args=args)
        except (RedisError, OSError) as exc:
            log.warning("quota store unreachable; key %s refused with 503 (%s)", key_id, exc)
            raise quotas.store_unreachable(OUTAGE_RETRY) from None
        index, first, second = int(answer[0]), answer[1], answer[2]
        counted = (int(answer[3]), int(answer[4]), int(answer[5]))
        if index:
            limit, least = int(limits[index - 1] or 0), int(answer[6])
            raise quotas.refusal(index - 1, limit, int(first), int(second), now, counted, least)
        price = second.decode() if isinstance(second, bytes) else str(second)
        return Reservation(keys, rid, tokens, int(first), price, owned, counted)

    async def settle(
        self,
        held: Reservation | None,
        key_id: int,
        owner_id: int | None,
        deployment_id: int,
        used: int,
        prompt: int = 0,
        factor: float = 1.0,
    ) -> Decimal | None:
        """Settle ``held`` with the ``used`` tokens, or, for a key admitted without Redis (``held`` None),
        charge their cost at the price times ``factor`` (gateway.charges); the USD charged, None when no price was
        known or Redis did not answer (logged: a request already answered never fails here)."""
        if held is None:
            return await self.charge(key_id, owner_id, deployment_id, used, prompt=prompt, factor=factor)
        keys, args = settlement(held.keys, held.rid, held.tokens, used, held.cost, held.price, held.owned, prompt)
        try:
            cost, price = await self._settle(keys=keys, args=args)
        except (RedisError, OSError) as exc:
            log.warning("quota store unreachable; a request of key %s was not settled (%s)", key_id, exc)
            return None
        return Decimal(int(cost)) / NANO if price else None

    async def charge(
        self,
        key_id: int,
        owner_id: int | None,
        deployment_id: int,
        used: int,
        at: float | None = None,
        prompt: int = 0,
        factor: float = 1.0,
    ) -> Decimal | None:
        """Charge ``used`` tokens (``prompt`` of them the prompt's) of a key admitted without Redis in this process's
        next batch (gateway.charges), at the price times ``factor`` (gateway.prices.price_factor), to the day and
        month of ``at`` (Unix s: when the request started, as a reservation is counted; default now); the USD
        charged, None when no price was known or Redis did not answer (logged)."""
        if used <= 0:
            return None
        try:
            price = await self.prices.get(self.redis, deployment_id)
        except (RedisError, OSError) as exc:
            log.warning("quota store unreachable; a request of key %s was not charged (%s)", key_id, exc)
            return None
        if not price:
            return None
        cost = nano_usd(used, scaled(price, factor), prompt)
        when = time.time() if at is None else at
        counters = counter_keys(key_id, owner_id, deployment_id, when)[4 : 8 if owner_id is not None else 6]
        self.charges.charge(counters, [TTL["day"], TTL["month"]] * (len(counters) // 2), cost)
        return Decimal(cost) / NANO

    async def close(self) -> None:
        await self.charges.close()
        await self.redis.aclose()
