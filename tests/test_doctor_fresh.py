"""``manage.py doctor`` on a new box, before anything was migrated (issue 36): a fresh data folder and no
DATABASE_URL (the embedded SQLite database, not made yet). It prints its report with the database first, not set up
yet and the fix (run ``manage.py migrate``), exits 1, and shows no traceback. A migrated database adds no line
(tests/test_doctor.py, the five checks alone)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.process


def doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "doctor", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_doctor_before_any_migration_reports_the_database_not_set_up(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env |= {
        "HEARTH_DATA_DIR": str(tmp_path / "data"),  # not there yet
        "HEARTH_RUNTIME": "process",
        "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock",
    }
    ran = doctor(env)
    assert "Traceback" not in ran.stdout + ran.stderr, ran.stderr
    lines = ran.stdout.splitlines()
    assert ran.returncode == 1 and lines[0] == "FAIL Database: not set up yet: no table exists (no migration applied)"
    assert lines[1].strip().startswith("fix: Run python manage.py migrate")
    assert any(line.startswith("NOT USED Docker:") for line in lines) and any("Weights cache disk" in x for x in lines)
    report = json.loads(doctor(env, "--json").stdout)
    assert report[0] == {
        "name": "Database",
        "status": "fail",
        "ok": False,
        "detail": "not set up yet: no table exists (no migration applied)",
        "fix": "Run python manage.py migrate (compose runs it in its migrate service before the others start).",
    }
