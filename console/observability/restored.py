"""What a restore in place (console.restore) leaves in Redis for beat's accounting check
(console.observability.charge_check): when it ran, and no counters of keys and members the archive does not hold.

The spending counters in Redis hold what was spent up to now; a restored request log holds the archive's rows only.
The check lowers a counter to its rows where they differ (a reservation Redis did not settle), which after the
restore of an older archive would give back what was spent since the backup. So a restore marks its time first, and
the check never lowers a counter of a day or month that began before the last mark (it still raises one). The mark
outlives a month's counter (MONTH_TTL); a Redis that lost it lost those counters too, which the log then puts back.

A key or member made since the backup is gone with the restore, and its id is given again to the next one made:
its counters are deleted, so that one does not start with their spend (its owner's counters keep it).
"""

import logging
import re

import redis
from django.conf import settings
from django.contrib.auth import get_user_model

from appliance.redis_keys import redis_key
from console.access.models import ApiKey
from console.observability.spent import MONTH_TTL

log = logging.getLogger(__name__)
TIMEOUT = 5.0  # seconds for Redis to connect or answer


def restored_key() -> str:
    """The Redis key holding when the database was last restored (Unix s)."""
    return redis_key("accounting:restored-at")


def mark(now: float) -> None:
    """Mark a restore at ``now`` (Unix s), kept MONTH_TTL seconds. Raises RedisError or OSError when Redis does not
    take it."""
    _client().set(restored_key(), repr(now), ex=MONTH_TTL)


def restored_at(r: "redis.Redis") -> float | None:
    """When the database was last restored (Unix s), None when no mark is kept."""
    value = r.get(restored_key())
    return None if value is None else float(value)


def forget_gone_holders() -> int:
    """Delete the counters of the keys and members the database does not hold (made since the backup); returns how
    many went. Never raises: a Redis that does not answer is logged, and those counters expire with their periods."""
    names = re.compile(re.escape(redis_key("quota:")) + r"(key|owner):(\d+):")
    keys = set(ApiKey.objects.values_list("pk", flat=True))
    members = set(get_user_model().objects.values_list("pk", flat=True)) | {0}  # 0: keys without an owner
    try:
        r = _client()
        gone = []
        for name in r.scan_iter(match=redis_key("quota:*"), count=1000):
            found = names.match(name.decode())
            if found and int(found[2]) not in (keys if found[1] == "key" else members):
                gone.append(name)
        return int(r.delete(*gone)) if gone else 0
    except (redis.RedisError, OSError) as exc:
        log.warning("restore: the counters of keys and members made since the backup were not deleted (%s)", exc)
        return 0


def _client() -> "redis.Redis":
    """A client of the appliance's Redis that waits TIMEOUT seconds at most to connect or for an answer."""
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)
