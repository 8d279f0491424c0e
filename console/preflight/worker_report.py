"""The pre-flight checks as the worker sees them, for the console's Pre-flight page and ``GET /api/doctor``.

In compose.yaml only the worker holds the Docker socket and a GPU reservation (NVML), and it is the
process that launches engines, so its view is the one that counts: the web process asks it through a
Celery task and waits for the report in the cache (Redis). ``manage.py doctor`` runs the checks in-process.
"""

import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from kombu.exceptions import OperationalError

from appliance.doctor import Check, run_checks
from console.preflight.disk import disk_need

REPORT_TTL = 300  # seconds a report stays in the cache for the page that asked for it
RUN_PREFLIGHT = "console.preflight.tasks.run_preflight"  # sent by name: tasks.py imports this module


class NoAnswer(RuntimeError):
    """No worker ran the checks in time; the message says what to do."""


@dataclass(frozen=True)
class Report:
    """The checks as one process ran them: its ``host`` name and when (``checked_at``, ISO 8601 UTC)."""

    host: str
    checked_at: str
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def as_dict(self) -> dict[str, object]:
        """``{"host", "checked_at", "ok", "checks": [{"name", "status", "ok", "detail", "fix"}, ...]}``."""
        checks = [c.as_dict() for c in self.checks]
        return {"host": self.host, "checked_at": self.checked_at, "ok": self.ok, "checks": checks}


def _key(run_id: str) -> str:
    """The report's cache key: Redis holds it as ``hearth:<instance>:1:preflight:<run id>`` (the cache's
    KEY_PREFIX, appliance.settings), under the appliance's prefix as every key is."""
    return f"preflight:{run_id}"


def report_here() -> Report:
    """Run every check in this process, the disk sized by the deployments' weights: this host's report, now."""
    checks = run_checks(disk_need())
    return Report(socket.gethostname(), datetime.now(UTC).isoformat(timespec="seconds"), checks)


def keep(run_id: str, report: Report) -> None:
    """Leave ``report`` in the cache under ``run_id`` for REPORT_TTL seconds, for the page that asked."""
    cache.set(_key(run_id), report.as_dict(), timeout=REPORT_TTL)


def worker_report(wait: float | None = None) -> Report:
    """Ask a worker to run the checks and wait up to ``wait`` seconds (default HEARTH_DOCTOR_WAIT) for them.

    Raises NoAnswer when the broker is unreachable or no worker answered in time; the request expires
    then, so a worker that comes up later does not run it for nobody.
    """
    wait = settings.HEARTH_DOCTOR_WAIT if wait is None else wait
    run_id = uuid.uuid4().hex
    try:
        current_app.send_task(RUN_PREFLIGHT, (run_id,), expires=wait)
    except OperationalError as exc:
        raise NoAnswer(f"Cannot reach the broker at REDIS_URL ({exc}): is Redis running?") from None
    deadline = time.monotonic() + wait
    while True:
        raw: dict[str, Any] | None = cache.get(_key(run_id))
        if raw is not None:
            checks = [Check.from_dict(c) for c in raw["checks"]]
            return Report(str(raw["host"]), str(raw["checked_at"]), checks)
        if time.monotonic() >= deadline:
            raise NoAnswer(
                f"No worker answered within {wait:g} s. Start it (docker compose up -d worker; make up again where "
                "make up runs it), or run python manage.py doctor where the worker runs."
            )
        time.sleep(0.1)
