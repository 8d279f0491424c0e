"""How the console tells every gateway process that keys or routes changed: a version number in Redis
that each gateway watches (gateway.registry reloads when it moves).

The change is in the database before anyone is told (callers bump after their transaction commits). A bump
that cannot reach Redis is not lost and does not fail the console's answer: one thread per process retries
it every RETRY_EVERY seconds until Redis takes it. Should the process die first, the gateways' own re-check
of the database every few seconds (gateway.registry.RECHECK_EVERY) still picks the change up.
"""

import logging
import threading
import time

import redis
from django.conf import settings

from appliance.redis_keys import redis_key

log = logging.getLogger(__name__)
RETRY_EVERY = 0.2  # seconds between attempts while Redis cannot be reached
TIMEOUT = 1.0  # seconds a bump may wait for Redis (connect, then answer) before it is left to the retries

_lock = threading.Lock()
_owed = False  # a bump is owed to Redis
_retrying: threading.Thread | None = None  # the thread delivering it


def routing_version_key() -> str:
    """The Redis key every gateway of this appliance watches: ``hearth:<instance>:routing-version``."""
    return redis_key("routing-version")


def bump_routing_version() -> None:
    """Move the routing version, so every gateway process reloads keys and routes.

    Never raises: when Redis cannot be reached (or answers nothing within TIMEOUT seconds) the bump is
    retried in the background until it is delivered; several owed bumps are delivered as one.
    """
    try:
        _incr()
    except (redis.RedisError, OSError) as exc:
        log.warning("routing change not announced yet (%s); retrying every %.1f s", exc, RETRY_EVERY)
        _owe()


def _incr() -> None:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=TIMEOUT, socket_timeout=TIMEOUT)
    try:
        client.incr(routing_version_key())
    finally:
        client.close()


def _owe() -> None:
    global _owed, _retrying
    with _lock:
        _owed = True
        if _retrying is None or not _retrying.is_alive():  # not alive: the thread of a parent before a fork
            _retrying = threading.Thread(target=_deliver, name="hearth-fanout-retry", daemon=True)
            _retrying.start()


def _deliver() -> None:
    """Retry until a bump gets through after the last one owed: one INCR covers every change committed
    before it."""
    global _owed, _retrying
    while True:
        with _lock:
            if not _owed:
                _retrying = None
                return
            _owed = False
        try:
            _incr()
        except (redis.RedisError, OSError):
            with _lock:
                _owed = True
            time.sleep(RETRY_EVERY)
            continue
        log.info("routing change announced after a Redis outage")
