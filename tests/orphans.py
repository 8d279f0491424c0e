"""Processes an earlier test run left behind on the same test database, ended before this run starts.

A pytest run killed mid-way leaves its child processes (they run in sessions of their own): its Celery workers go on
serving its instance's queues, named from DATABASE_URL and the data folder (appliance.settings.HEARTH_INSTANCE),
which the next run on the same database reuses (as it does the instances some modules name for their own workers),
and they took that run's tasks with a database it had dropped (a batch's lines never ran); their connections also
keep pytest-django from making the test database again. Their environment names them: the test database's URL
(pytest-django's ``test_<name>``, ``_gw0`` added for an xdist worker), which only a run's children carry (the test
process holds the database it was given); another run on that database would drop it, so none is running.
"""

import os
import signal
from pathlib import Path

PROC = Path("/proc")


def run_database(name: str, xdist_worker: str) -> str:
    """The test database pytest-django makes for the database ``name`` in the xdist worker ``xdist_worker``
    ("" without xdist)."""
    return f"test_{name}_{xdist_worker}" if xdist_worker else f"test_{name}"


def end_orphans(database: str) -> list[int]:
    """SIGKILL every process whose environment's DATABASE_URL names the database ``database`` (a test database:
    ``run_database``); returns their ids. Reads /proc (Linux); processes it may not read are not another run's
    children."""
    ended = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or another user's
            continue
        urls = [item.removeprefix(b"DATABASE_URL=") for item in environ if item.startswith(b"DATABASE_URL=")]
        if not urls or urls[0].split(b"?")[0].rsplit(b"/", 1)[-1] != database.encode():
            continue
        try:
            os.kill(int(entry.name), signal.SIGKILL)
        except ProcessLookupError:
            continue
        ended.append(int(entry.name))
    return ended
