"""The names of the Redis counters of what keys and their owners spent, in nano-USD by UTC day and month: the
gateway charges them (gateway.reservations, gateway.charges) and beat's accounting check holds them to the
request log (console.observability.charge_check). Each outlives its period by a margin (DAY_TTL, MONTH_TTL)."""

from datetime import UTC, datetime

from appliance.redis_keys import redis_key

DAY_TTL = 2 * 86400  # seconds a day's counter outlives its first charge
MONTH_TTL = 62 * 86400


def key_counters(key_id: int) -> str:
    """The prefix of an API key's counters (its limits' windows, its running requests, its spending)."""
    return redis_key(f"quota:key:{key_id}")


def owner_counters(owner_id: int | None) -> str:
    """The prefix of a member's counters (their spending over all their keys)."""
    return redis_key(f"quota:owner:{owner_id or 0}")


def periods(at: float) -> tuple[str, str]:
    """The (day, month) a moment (Unix s) is counted in, as the counters name them: ``20261201``, ``202612``."""
    when = datetime.fromtimestamp(at, UTC)
    return when.strftime("%Y%m%d"), when.strftime("%Y%m")


def usd_counters(key_id: int, owner_id: int | None, at: float) -> tuple[str, str, str, str]:
    """The key's day and month and its owner's day and month counters of a request admitted at ``at`` (Unix s)."""
    day, month = periods(at)
    mine, owner = key_counters(key_id), owner_counters(owner_id)
    return f"{mine}:usd:{day}", f"{mine}:usd:{month}", f"{owner}:usd:{day}", f"{owner}:usd:{month}"
