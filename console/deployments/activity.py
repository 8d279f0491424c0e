"""When each deployment last had a request, and which requests it has in flight, kept in Redis by the gateway (no
database write on the hot path) and read by the idle policy (console.deployments.idling).

Keys, under this appliance's prefix (appliance.redis_keys):

- ``last-request:<deployment id>``: Unix seconds (a float as text) of the last request's start or end;
- ``in-flight:<deployment id>``: a sorted set of request ids, each scored by when it lapses (started + LAPSE s),
  so a gateway process that dies mid-request does not hold the count up for ever (the score, not a DECR,
  ends it).

The gateway notes a request when it starts (routed to the deployment, held for its wake included) and when its
answer is over (sent, failed, cut or left): ``request_started`` and ``request_ended`` with the redis.asyncio client
it has, or the same writes folded into the accounting's own round trips (the scripts of gateway.ledger and
gateway.reservations, which take these keys, LAPSE and KEPT); the worker reads with a plain client.
Imports only appliance.redis_keys and redis: the gateway may import it.
"""

import time
from collections.abc import Callable

import redis
import redis.asyncio as aioredis

from appliance.redis_keys import redis_key

LAPSE = 3600  # seconds a request counts in flight at most (a stream longer than this is counted out)
KEPT = 35 * 24 * 3600  # seconds the keys live after the last request (an idle deployment's are then gone)


def last_request_key(deployment_id: int) -> str:
    """``hearth:<instance>:last-request:<id>``."""
    return redis_key(f"last-request:{deployment_id}")


def in_flight_key(deployment_id: int) -> str:
    """``hearth:<instance>:in-flight:<id>``."""
    return redis_key(f"in-flight:{deployment_id}")


async def request_started(
    client: aioredis.Redis, deployment_id: int, request_id: str, now: float | None = None
) -> None:
    """Note that ``request_id`` went to the deployment's engine ``now`` (Unix seconds; default the clock's).
    Raises redis.RedisError when Redis does not answer."""
    at = time.time() if now is None else now
    async with client.pipeline(transaction=True) as pipe:
        pipe.set(last_request_key(deployment_id), repr(at), ex=KEPT)
        pipe.zadd(in_flight_key(deployment_id), {request_id: at + LAPSE})
        pipe.expire(in_flight_key(deployment_id), LAPSE)
        await pipe.execute()


async def request_ended(client: aioredis.Redis, deployment_id: int, request_id: str, now: float | None = None) -> None:
    """Note that ``request_id``'s answer is over ``now`` (Unix seconds). Raises redis.RedisError."""
    at = time.time() if now is None else now
    async with client.pipeline(transaction=True) as pipe:
        pipe.set(last_request_key(deployment_id), repr(at), ex=KEPT)
        pipe.zrem(in_flight_key(deployment_id), request_id)
        await pipe.execute()


def in_flight(client: redis.Redis, deployment_id: int, now: float | None = None) -> int:
    """How many requests the deployment has in flight (lapsed ones dropped). Raises redis.RedisError."""
    at = time.time() if now is None else now
    key = in_flight_key(deployment_id)
    client.zremrangebyscore(key, "-inf", at)
    return int(client.zcard(key))


def drained(
    client: redis.Redis,
    deployment_id: int,
    seconds: float,
    not_before: float = 0.0,
    on_count: Callable[[int], object] | None = None,
    poll: float = 0.2,
) -> bool:
    """Wait, polling every ``poll`` seconds, until the deployment has no request in flight and the clock has passed
    ``not_before`` (Unix seconds), for up to ``seconds``: True once it has, False when the time ran out.
    ``on_count(n)`` hears each new count of requests still in flight. Raises redis.RedisError."""
    deadline, said = time.monotonic() + seconds, 0
    while True:
        left = in_flight(client, deployment_id)
        if not left and time.time() >= not_before:
            return True
        if time.monotonic() > deadline:
            return False
        if left and left != said and on_count is not None:
            on_count(left)
            said = left
        time.sleep(poll)


def last_request(client: redis.Redis, deployment_id: int) -> float | None:
    """Unix seconds of the deployment's last request's start or end; None when none is known. Raises
    redis.RedisError."""
    value = client.get(last_request_key(deployment_id))
    return float(value) if value is not None else None


def note_request(client: redis.Redis, deployment_id: int, at: float) -> None:
    """Set the last request's time to ``at`` (Unix seconds): a wake counts as one, so a woken deployment is not put
    back to sleep before its held requests arrive. Raises redis.RedisError."""
    client.set(last_request_key(deployment_id), repr(at), ex=KEPT)
