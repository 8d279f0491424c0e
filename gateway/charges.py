"""The costs of requests from keys without limits, added to their USD counters in Redis in batches.

Such a key is admitted without Redis (gateway.reservations); its requests' costs still go to the key's and its
owner's day and month USD counters, so that a budget set later starts from what was spent. One script call
every FLUSH_EVERY seconds per process adds all the costs charged meanwhile: a call per request cost a quarter
of the relay's CPU at 64 streams (py-spy, bench/README.md), whatever the answer's length. So those counters
lag the request log by up to FLUSH_EVERY seconds. What a process had not flushed when it was killed is lost
from the counters, never from the log; a flush Redis does not take is logged and dropped, as a settlement it
does not take is. A stop flushes (``close``).

The cost is rounded as the settlement script rounds it: ``floor(tokens × USD per token × 1e9 + 0.5)`` nano-USD
(``floor((prompt × input + rest × output) × 1e9 + 0.5)`` for a price "input,output"), in doubles, so a key's
counters hold the same sum whichever way its requests were charged.
"""

import asyncio
import logging
import math
from collections.abc import Sequence

import redis.asyncio as aioredis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)
FLUSH_EVERY = 0.5  # seconds between additions to the counters (at most one script call each)

# KEYS: the counters; ARGV: for each, the nano-USD to add, then its TTL in seconds (set when it is new).
ADD = """
for i = 1, #KEYS do
  local new = redis.call('EXISTS', KEYS[i]) == 0
  redis.call('INCRBY', KEYS[i], ARGV[2 * i - 1])
  if new then redis.call('EXPIRE', KEYS[i], ARGV[2 * i]) end
end
"""


def priced(tokens: int, price: str, prompt: int = 0) -> float:
    """What ``tokens`` cost at ``price`` USD per token (a decimal string, or "input,output" where the ``prompt``
    tokens among them cost the first and the rest the second), in USD, as a double (the scripts' ``priced``)."""
    first, comma, second = price.partition(",")
    if not comma:
        return tokens * float(price)
    paid_in = min(max(prompt, 0), tokens)
    return paid_in * float(first) + (tokens - paid_in) * float(second)


def nano_usd(tokens: int, price: str, prompt: int = 0) -> int:
    """What ``tokens`` cost (``priced``) in nano-USD, rounded to the nearest as a settlement is (module docstring)."""
    return math.floor(priced(tokens, price, prompt) * 1e9 + 0.5)


class Charges:
    """One process's costs not yet added, per counter."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self._add = redis.register_script(ADD)
        self._pending: dict[str, list[int]] = {}  # counter → [nano-USD, TTL seconds]
        self._timer: asyncio.TimerHandle | None = None  # the next flush
        self._flushing: set[asyncio.Task[None]] = set()

    def charge(self, counters: Sequence[str], ttls: Sequence[int], nano: int) -> None:
        """Add ``nano`` nano-USD to each of ``counters`` (each with its TTL, seconds) at the next flush."""
        if nano <= 0:
            return
        for counter, ttl in zip(counters, ttls, strict=True):
            self._pending.setdefault(counter, [0, ttl])[0] += nano
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_EVERY, self._flush_now)

    def _flush_now(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self.flush())
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def flush(self) -> None:
        """Add what is pending now."""
        pending, self._pending = self._pending, {}
        if not pending:
            return
        args = [str(v) for amount, ttl in pending.values() for v in (amount, ttl)]
        try:
            await self._add(keys=list(pending), args=args)
        except (RedisError, OSError) as exc:
            log.warning(
                "quota store unreachable; %d USD counters of keys without limits not updated (%s)", len(pending), exc
            )

    async def close(self) -> None:
        """Flush what is pending (a stop): the flush under way first, then the rest, with none left scheduled."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing:
            await asyncio.gather(*self._flushing, return_exceptions=True)
        await self.flush()
