"""Deployments' USD per token as one gateway process charges keys without limits, read from Redis and kept.

The worker writes each deployment's price to Redis with a TTL (console.observability.cost.publish_price). A
price read here is kept until Redis announces that its key changed (gateway.registry's watch follows the price
keys' prefix as well as the routing version; a write, a deletion, an expiry and a flush are all announced),
and never longer than MAX_AGE seconds whatever was announced; while no watch is live nothing is kept, so every
charge reads the price of that moment, as before the cache. A read that began before an announcement is not
kept. Admission and settlement of keys with limits read the price inside their own scripts
(gateway.reservations), never from here.
"""

import time

import redis.asyncio as aioredis

from console.observability.cost import price_per_token

MAX_AGE = 2.0  # seconds a price is used without reading it again (gateway.registry's RECHECK_EVERY)


class Prices:
    """One process's cache of ``deployment id → USD per token`` (a decimal string, "" when none is published)."""

    def __init__(self) -> None:
        self.live = False  # the registry's watch is announcing price changes (set by gateway.registry)
        self._kept: dict[int, tuple[str, float]] = {}  # price, monotonic seconds it was read
        self._announcements = 0  # changes announced so far: a read that saw one begin meanwhile is not kept

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
        value = await redis.get(price_per_token(deployment_id))
        price = value.decode() if isinstance(value, bytes) else str(value or "")
        if self.live and seen == self._announcements:
            self._kept[deployment_id] = (price, now)
        return price
