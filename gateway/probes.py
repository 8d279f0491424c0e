"""Open probes for a load balancer or an orchestrator, answered on the web process before Django sees the
request (so no login, no ALLOWED_HOSTS, no CSRF): ``/health`` and ``/ready``, both JSON.

- ``/health``: liveness. 200 ``{"status": "up"}`` whenever the process answers at all.
- ``/ready``: readiness. 200 ``{"status": "ready", "checks": {...}}`` when the database answers, Redis
  answers, the gateway holds keys and routes read from the database, and HEARTH_DATA_DIR's disk has
  HEARTH_READY_MIN_FREE_MIB free; else 503 ``{"status": "not ready", "checks": {...}}`` with ``Retry-After``,
  each failing check naming only the kind of its failure (the details go to the log, not to whoever asks).
  Each check waits at most CHECK_TIMEOUT seconds and is made afresh at every ask, so /ready recovers by
  itself once the database is back or space is freed.
"""

import asyncio
import json
import logging
import shutil
from collections.abc import Awaitable
from typing import Any

from django.conf import settings

from gateway.asgi_io import Send, send_json
from gateway.registry import Registry

log = logging.getLogger(__name__)
CHECK_TIMEOUT = 2.0  # seconds per readiness check
RETRY_AFTER = 5  # seconds a load balancer is told to wait before asking /ready again
MIB = 1024 * 1024


class Failed(Exception):
    """A check that answered, and not well: its message is the answer's words."""


async def health(send: Send) -> None:
    await _answer(send, 200, {"status": "up"})


async def ready(registry: Registry, send: Send) -> None:
    results = await asyncio.gather(
        _check("database", registry.check_database()),
        _check("redis", registry.redis.ping()),
        _check("keys and routes", registry.current()),
        _check("data disk", asyncio.to_thread(data_disk_room)),
    )
    checks = dict(zip(("database", "redis", "keys_and_routes", "data_disk"), results, strict=True))
    if all(result == "ok" for result in checks.values()):
        await _answer(send, 200, {"status": "ready", "checks": checks})
        return
    retry = ((b"retry-after", str(RETRY_AFTER).encode()),)
    await _answer(send, 503, {"status": "not ready", "checks": checks}, retry)


def data_disk_room() -> None:
    """Raises Failed ("full: 3 MiB free, under 100") when HEARTH_DATA_DIR's disk has less than
    HEARTH_READY_MIN_FREE_MIB free (for an unprivileged process: statvfs's f_bavail), OSError when it cannot be
    measured."""
    free = shutil.disk_usage(settings.DATA_DIR).free / MIB
    if free < settings.HEARTH_READY_MIN_FREE_MIB:
        raise Failed(f"full: {free:.0f} MiB free, under {settings.HEARTH_READY_MIN_FREE_MIB:.0f}")


async def _check(name: str, work: Awaitable[object]) -> str:
    """ "ok", or what went wrong in a few words (logged in full)."""
    try:
        await asyncio.wait_for(work, CHECK_TIMEOUT)
    except TimeoutError:
        log.warning("readiness: %s did not answer within %.0f s", name, CHECK_TIMEOUT)
        return f"no answer within {CHECK_TIMEOUT:.0f} s"
    except Failed as exc:
        log.warning("readiness: %s: %s", name, exc)
        return str(exc)
    except Exception as exc:
        log.warning("readiness: %s failed: %s", name, exc)
        return f"unreachable ({type(exc).__name__})"
    return "ok"


async def _answer(send: Send, status: int, body: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    await send_json(send, status, json.dumps(body).encode(), [(b"cache-control", b"no-store"), *headers])
