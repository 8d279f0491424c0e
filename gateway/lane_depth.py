"""The priority lanes' queue depth in Redis (gateway.lanes): what each relay process holds, for the console
(console.observability.queue_depth) and for the other processes, which hold batch work behind any process's held
standard requests and share the room a reading leaves between the processes holding requests.

Shape (console.observability.queue_depth reads it too, and parses each field): the hash ``lanes:<deployment id>``
(``depth_key``), field ``<host>:<pid>`` (PROCESS), value ``{"standard": n, "batch": n, "at": Unix seconds}``; the
field is deleted when the deployment's traffic in that process ends, and the hash expires DEPTH_TTL seconds after
its last write. Another process's field counts for ELSEWHERE_FRESH seconds after it was written (a process killed
leaves one behind). Redis not answering is logged and holds nothing back: each process then goes by its own
queues alone.
"""

import asyncio
import json
import logging
import os
import socket
import time
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from console.observability.queue_depth import depth_key, entry_counts

log = logging.getLogger(__name__)

PROCESS = f"{socket.gethostname()}:{os.getpid()}"
DEPTH_TTL = 60  # seconds the hash outlives its last write
ELSEWHERE_FRESH = 5.0  # seconds another process's field counts after it was written (it rewrites it every 2 s)
TIMEOUT = 1.0  # seconds a read or write waits for Redis


@dataclass(frozen=True)
class Elsewhere:
    """The other processes' held requests for a deployment: standard ones in all, and each process holding any with
    its (standard, batch) counts."""

    standard: int = 0
    held: dict[str, tuple[int, int]] = field(default_factory=dict)


async def publish(client: aioredis.Redis, deployment_id: int, process: str, counts: dict[str, int] | None) -> bool:
    """Write ``process``'s held requests per class (``counts``), or delete its field (None). False when Redis did
    not take it (logged: the lanes go on without it)."""
    key = depth_key(deployment_id)
    try:
        async with asyncio.timeout(TIMEOUT):
            if counts is None:
                await client.hdel(key, process)
            else:
                pipe = client.pipeline(transaction=False)
                pipe.hset(key, process, json.dumps({**counts, "at": time.time()}))
                pipe.expire(key, DEPTH_TTL)
                await pipe.execute()
        return True
    except (RedisError, TimeoutError) as exc:
        log.warning("queue depth of deployment %s not written to Redis: %s", deployment_id, exc)
        return False


async def elsewhere(client: aioredis.Redis, deployment_id: int, process: str) -> Elsewhere:
    """What the processes other than ``process`` hold for the deployment, from their fresh fields; none when Redis
    does not answer."""
    try:
        async with asyncio.timeout(TIMEOUT):
            fields = await client.hgetall(depth_key(deployment_id))
    except (RedisError, TimeoutError) as exc:
        log.warning("queue depth of deployment %s not read from Redis: %s", deployment_id, exc)
        return Elsewhere()
    standard, held = 0, {}
    since = time.time() - ELSEWHERE_FRESH
    for name, raw in fields.items():
        other = name.decode() if isinstance(name, bytes) else str(name)
        counts = entry_counts(raw, since) if other != process else None
        if counts is not None and counts["standard"] + counts["batch"] > 0:
            standard += counts["standard"]
            held[other] = (counts["standard"], counts["batch"])
    return Elsewhere(standard, held)
