"""Requests held in the gateway's priority lanes now, per deployment and class, for the dashboard.

Each gateway process writes its own count per class to the Redis hash ``lanes:<deployment id>``
(appliance.redis_keys), field ``<host>:<pid>``, value ``{"standard": n, "batch": n, "at": Unix seconds}``, while the
deployment has traffic in it (gateway.lanes: at each change and every 2 s); an entry older than STALE_AFTER seconds
(a process killed without deleting its field) is left out. Interactive requests are never held: their count is 0.
"""

import json
import logging
import time
from collections.abc import Iterable

import redis
from django.conf import settings

from appliance.redis_keys import redis_key

log = logging.getLogger(__name__)
CLASSES = ("interactive", "standard", "batch")
STALE_AFTER = 10.0  # seconds: five times what a busy process rewrites its entry within
READ_TIMEOUT = 2.0  # seconds Redis may take


def depth_key(deployment_id: int) -> str:
    """The Redis hash of one deployment's held requests, one field per gateway process."""
    return redis_key(f"lanes:{deployment_id}")


def entry_counts(raw: bytes | str, since: float) -> dict[str, int] | None:
    """One process's entry as held requests per class (CLASSES, each present; a count that is not a whole number
    above 0 is 0); None when it was written before ``since`` (Unix seconds) or is not such JSON (logged)."""
    try:
        entry = json.loads(raw)
    except ValueError:
        log.warning("a queue-depth entry that is not JSON (%r) is left out", raw[:80])
        return None
    if not isinstance(entry, dict) or not isinstance(at := entry.get("at"), int | float) or at < since:
        return None
    counts = {name: entry.get(name) for name in CLASSES}
    return {name: c if isinstance(c, int) and not isinstance(c, bool) and c > 0 else 0 for name, c in counts.items()}


def tally(entries: Iterable[bytes | str], now: float) -> dict[str, int]:
    """Held requests per class (CLASSES, each present) summed over the processes' entries written since
    ``now`` - STALE_AFTER (Unix seconds); entries that are not such JSON are left out (logged)."""
    out = dict.fromkeys(CLASSES, 0)
    for raw in entries:
        for name, count in (entry_counts(raw, now - STALE_AFTER) or {}).items():
            out[name] += count
    return out


def queue_depth(deployment_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    """Deployment id → {"interactive": 0, "standard": n, "batch": n}: the requests every living gateway process
    holds for it now (one Redis round trip). Empty when Redis does not answer (logged): a deployment missing from
    the answer is one whose depth is not known (the dashboard says so), never a 0."""
    ids = list(deployment_ids)
    r = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=READ_TIMEOUT, socket_connect_timeout=READ_TIMEOUT)
    try:
        with r.pipeline(transaction=False) as pipe:
            for pk in ids:
                pipe.hvals(depth_key(pk))
            answers = pipe.execute()
    except (redis.RedisError, OSError) as exc:
        log.warning("Redis does not answer: the lanes' queue depth is not known (%s)", exc)
        return {}
    now = time.time()
    return {pk: tally(entries, now) for pk, entries in zip(ids, answers, strict=True)}
