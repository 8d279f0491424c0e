"""An earlier run's children on the same test database, whatever instance they serve, are ended before this run
makes the database again (tests.orphans); a process of another database's run is left alone."""

import os
import signal
import subprocess

import pytest

from tests.orphans import end_orphans, run_database

pytestmark = pytest.mark.process
URL = "postgres://postgres@127.0.0.1:5432/"


def test_only_the_children_of_a_run_on_the_same_test_database_are_ended() -> None:
    assert run_database("hearth", "gw1") == "test_hearth_gw1" and run_database("hearth", "") == "test_hearth"
    ours = {"HEARTH_INSTANCE": "orphan-test", "DATABASE_URL": URL + "test_orphans_gw0"}
    own_instance = {**ours, "HEARTH_INSTANCE": "batch-test"}  # a module's workers of their own instance
    theirs = [{**ours, "DATABASE_URL": URL + name} for name in ("test_orphans_gw1", "orphans", "test_orphans")]
    left, left_too, *others = (
        subprocess.Popen(["sleep", "60"], env={**os.environ, **env}, start_new_session=True)
        for env in (ours, own_instance, *theirs)
    )
    try:
        assert sorted(end_orphans("test_orphans_gw0")) == sorted([left.pid, left_too.pid])
        assert left.wait(10) == left_too.wait(10) == -signal.SIGKILL
        assert [other.poll() for other in others] == [None] * 3
    finally:
        for other in others:
            other.kill()
            other.wait()
