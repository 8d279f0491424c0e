"""``manage.py`` refusals a person reads: a setting refused before any command runs, and a backup to a folder that
is not there, each one line saying what to do, without a traceback (a fresh user's trial found both as tracebacks);
and a backup that replaced an earlier archive says so.
"""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import ROOT


@pytest.mark.django_db
def test_a_backup_to_a_folder_that_is_not_there_says_so(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"^cannot write .*/x.tar.gz: there is no folder .*/nowhere; make it or"):
        call_command("backup", str(tmp_path / "nowhere" / "x.tar.gz"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.django_db(transaction=True)  # the backup's snapshot sets its own transaction's isolation
def test_a_backup_over_an_earlier_archive_says_it_replaced_it(tmp_path: Path) -> None:
    archive, said = tmp_path / "x.tar.gz", io.StringIO()
    call_command("backup", str(archive), stderr=said)
    assert said.getvalue().startswith("backup: ") and "replaced" not in said.getvalue()
    call_command("backup", str(archive), stderr=said)
    assert f"to {archive} (it replaced the archive that was there)\nbackup: not in it: " in said.getvalue()


@pytest.mark.process
def test_a_command_without_a_secret_key_says_why_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "SECRET_KEY_FILE")}
    env["HEARTH_DATA_DIR"] = str(tmp_path)  # a fresh data folder: no secret_key file
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("manage.py: SECRET_KEY is empty or a placeholder.") and done.stdout == ""


@pytest.mark.process
def test_a_backup_of_a_data_folder_without_its_sqlite_database_says_so_and_makes_none(tmp_path: Path) -> None:
    """A trial ran backup on a PostgreSQL appliance's folder without its DATABASE_URL: it was told to run migrate, and
    an empty hearth.sqlite3 was left there, which make down then took for the appliance's database."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env |= {"HEARTH_DATA_DIR": str(tmp_path), "SECRET_KEY": "a-long-enough-secret-key-for-this-one-test-0123456789"}
    done = subprocess.run(
        [sys.executable, "manage.py", "backup", str(tmp_path / "x.tar.gz")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"there is no database at {tmp_path}/hearth.sqlite3: give this command the HEARTH_DATA_DIR" in done.stderr
    assert list(tmp_path.iterdir()) == []
