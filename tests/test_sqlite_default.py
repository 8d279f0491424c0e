"""The embedded default holds under load: with DATABASE_URL unset, the SQLite database (appliance.settings: WAL,
IMMEDIATE write transactions, a busy timeout) serves writers and readers in several processes at once, the web
processes' and the worker's kinds of work together (tests/sqlite_load.py), without one "database is locked"."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.process
SECONDS = 15  # of load in every process at once


def test_web_and_worker_processes_writing_at_once_never_meet_database_is_locked(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PYTEST_XDIST_WORKER")}
    env |= {
        "HEARTH_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DEBUG": "1",
        "PYTHONPATH": str(ROOT),
    }
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    roles = ["web", "web", "worker", "worker", "reader"]
    procs = [
        subprocess.Popen(
            [sys.executable, "tests/sqlite_load.py", role, str(SECONDS)], cwd=ROOT, env=env, stdout=subprocess.PIPE
        )
        for role in roles
    ]
    results = [json.loads(p.communicate(timeout=SECONDS + 120)[0].decode().splitlines()[-1]) for p in procs]
    assert (tmp_path / "hearth.sqlite3").exists()
    assert [r["journal_mode"] for r in results] == ["wal"] * len(roles)
    assert [(r["role"], r["locked"], r["other"]) for r in results] == [(role, 0, []) for role in roles], results
    assert all(r["ops"] >= 10 for r in results), results
