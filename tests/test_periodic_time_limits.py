"""A periodic task that hangs is stopped at its time limit (appliance.celery.time_limits), so the upkeep worker gets
its processes back: a transaction holding the deployments table (as a stuck migration or a restore might) blocks every
reconcile beat sends, until each of the worker's three processes is held; the limit ends them, and once the lock goes
the next reconcile runs through. Real processes: the appliance's workers with beat embedded, on a broker of their own
(HEARTH_INSTANCE), the test's PostgreSQL."""

import re
import time
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from tests.conftest import Workers

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]
RECONCILE = 2  # seconds: its runs expire 1.8 s after beat sends them (appliance.celery.schedule_periodic_tasks)
LIMIT = 4  # seconds: HEARTH_PERIODIC_TIME_LIMIT here, twice the reconcile period
STOPPED = re.compile(r"(Soft|Hard) time limit \(\S+\) exceeded for console\.deployments\.tasks\.reconcile")
DONE = re.compile(r"Task console\.deployments\.tasks\.reconcile\[\S+\] succeeded")


def until(found: re.Pattern[str], workers: Workers, after: int, seconds: float) -> int:
    """Wait for ``found`` in the upkeep worker's log past offset ``after``; returns where that match ends."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        match = found.search(workers.upkeep.output(), after)
        if match:
            return match.end()
        time.sleep(0.2)
    pytest.fail(f"no {found.pattern!r} within {seconds} s:\n{workers.output()[-6000:]}")


def test_a_hung_reconcile_is_stopped_and_the_next_one_runs(live_env: dict[str, str], tmp_path: Path) -> None:
    env = {
        **live_env,
        "HEARTH_INSTANCE": f"{settings.HEARTH_INSTANCE}-limits",  # a broker and beat of its own
        "HEARTH_RECONCILE_INTERVAL": str(RECONCILE),
        # the other periodic tasks that read the locked table not sent within the test: held too, with limits of
        # twice their longer periods (the alerts' 30 s), they kept the processes while every reconcile sent
        # expired in the queue (a CI run saw none start within 33 s)
        **{f"HEARTH_{name}_INTERVAL": "3600" for name in ("SCRAPE", "ALERT", "ACCOUNTING_CHECK")},
        "HEARTH_PERIODIC_TIME_LIMIT": str(LIMIT),
    }
    workers = Workers(env, tmp_path)
    try:
        until(DONE, workers, 0, 60)  # reconcile runs
        db = connection.settings_dict
        with psycopg.connect(
            host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"] or "postgres", dbname=db["NAME"]
        ) as locker:
            locker.execute("LOCK TABLE deployments_deployment IN ACCESS EXCLUSIVE MODE")
            held = len(workers.upkeep.output())
            stopped = until(STOPPED, workers, held, LIMIT + 30)  # soft, or hard 10 s on: the process is freed
            locker.rollback()
        until(DONE, workers, stopped, 30)  # the lock gone, the next reconcile runs through
        assert workers.upkeep.proc.poll() is None and workers.long.proc.poll() is None, workers.output()
    finally:
        workers.stop()
