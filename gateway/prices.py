"""Deployments' USD per token as one gateway process charges keys without limits, read from Redis and kept.

The worker writes each deployment's price to Redis with a TTL (console.observability.cost.publish_price). A
price read here is kept until Redis announces that its key changed (gateway.registry's watch follows the price
keys' prefix as well as the routing version; a write, a deletion, an expiry and a flush are all announced),
and never longer than MAX_AGE seconds whatever was announced; while no watch is live nothing is kept, so every
charge reads the price of that moment, as before the cache. A read that began before an announcement is not
kept. The requests that need a deployment's price while it is being read share that read (one GET, not one per
request ending at that moment, each on a connection of its own: at 64 streams they grew the Redis pool at every
MAX_AGE, and a new connection costs ~1–2 ms of CPU), unless an announcement came after it began. Admission and
settlement of keys with limits read the price inside their own scripts (gateway.reservations), never from here.

A batch-class request (gateway.relay_plan.RelayPlan.priority "batch") is charged the price times
HEARTH_BATCH_PRICE_FACTOR (``price_factor``, ``scaled``); the scripts scale it the same way (SCALE_FUNCTION), in
doubles, so a request costs the same nano-USD whichever path charges it.
"""

import asyncio
import time

import redis.asyncio as aioredis
from django.conf import settings

from console.observability.cost import price_per_token

MAX_AGE = 2.0  # seconds a price is used without reading it again (gateway.registry's RECHECK_EVERY)
BATCH = "batch"  # the class charged at the batch price factor (console.access.models.Priority.BATCH)

# Lua: ``scaled(price, factor)`` as ``scaled`` below: a price ('' none; "input,output") times ``factor`` (nil or 1:
# the price as it is), each part written with 17 significant digits (the same double once read again).
SCALE_FUNCTION = """
local function scaled(price, factor)
  if price == '' or factor == nil or factor == 1 then return price end
  local first, second = string.match(price, '^([^,]+),(.+)$')
  if first then return string.format('%.17g,%.17g', tonumber(first) * factor, tonumber(second) * factor) end
  return string.format('%.17g', tonumber(price) * factor)
end
"""


def price_factor(priority: str) -> float:
    """The share of its deployment's price a request of class ``priority`` is charged: HEARTH_BATCH_PRICE_FACTOR
    (over 0, at most 1) for batch, 1 for the others."""
    return float(settings.HEARTH_BATCH_PRICE_FACTOR) if priority == BATCH else 1.0


def scaled(price: str, factor: float) -> str:
    """``price`` (USD per token, a decimal string, or "input,output"; "" none) times ``factor``, as the scripts'
    ``scaled`` computes it (in doubles); "" stays "", and a factor of 1 leaves the price as it is."""
    if not price or factor == 1:
        return price
    return ",".join(repr(float(part) * factor) for part in price.split(","))


class Prices:
    """One process's cache of ``deployment id → USD per token`` (a decimal string, "" when none is published)."""

    def __init__(self) -> None:
        self.live = False  # the registry's watch is announcing price changes (set by gateway.registry)
        self._kept: dict[int, tuple[str, float]] = {}  # price, monotonic seconds it was read
        self._announcements = 0  # changes announced so far: a read that saw one begin meanwhile is not kept
        self._reading: dict[int, tuple[asyncio.Future[str], int]] = {}  # reads under way, announcements at start

    def forget(self) -> None:
        """A price key changed (or the watch reopened, or Redis was flushed): read every price again."""
        self._announcements += 1
        self._kept.clear()

    async def get(self, redis: aioredis.Redis, deployment_id: int) -> str:
        """The deployment's USD per token ("" none). Raises what redis-py raises when it must read and cannot."""
        now = time.monotonic()
        kept = self._kept.get(deployment_id)
        if kept is not None and self.live and now - kept[1] < MAX_AGE:
            return kept[0]
        seen = self._announcements
        reading = self._reading.get(deployment_id)
        if reading is None or reading[1] != seen:
            read = asyncio.ensure_future(self._read(redis, deployment_id, now, seen))
            read.add_done_callback(_retrieved)
            reading = self._reading[deployment_id] = (read, seen)
        return await asyncio.shield(reading[0])  # one caller that leaves does not cancel the others' read

    async def _read(self, redis: aioredis.Redis, deployment_id: int, now: float, seen: int) -> str:
        """The price read from Redis (``seen``: the announcements when it was asked for), kept unless one came
        meanwhile."""
        try:
            value = await redis.get(price_per_token(deployment_id))
        finally:
            if (reading := self._reading.get(deployment_id)) is not None and reading[1] == seen:
                del self._reading[deployment_id]
        price = value.decode() if isinstance(value, bytes) else str(value or "")
        if self.live and seen == self._announcements:
            self._kept[deployment_id] = (price, now)
        return price


def _retrieved(read: "asyncio.Future[str]") -> None:
    """A shared read's error counts as seen even when every request that waited for it has left."""
    if not read.cancelled():
        read.exception()
