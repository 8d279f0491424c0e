"""`make up`'s bring-up (scripts/up.sh) runs beat as its own process: after the worker is killed with
SIGKILL, and after a second bring-up (a restart, which stops the web server last), exactly one beat sends the
periodic tasks; `make down` stops it.
The appliance runs here on SQLite in its own data folder, with a Redis up.sh starts on its own port,
and its files are checked for their modes along the way."""

import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.process


def beats(data: Path) -> list[int]:
    """Pids of live Celery beat processes of the appliance in ``data`` (its schedule file names them)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        is_beat = b"beat" in argv or b"-B" in argv  # a beat of its own, or one embedded in a worker
        if is_beat and any(str(data).encode() in a for a in argv) and state != "Z":
            found.append(int(cmdline.parent.name))
    return found


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def appliance(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SECRET_KEY", "SECRET_KEY_FILE")}
    env |= {
        "HEARTH_DATA_DIR": str(data),
        "HEARTH_PORT": str(free_port()),
        "PY": sys.executable,
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
    }
    yield data, env
    subprocess.run(["bash", "scripts/down.sh"], cwd=ROOT, env=env, capture_output=True, check=False)


def up(env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "scripts/up.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_sigkilled_worker_leaves_exactly_one_beat_and_the_data_folder_stays_private(
    appliance: tuple[Path, dict[str, str]],
) -> None:
    data, env = appliance
    up(env)
    assert len(beats(data)) == 1
    assert (mode(data), mode(data / "logs")) == (0o700, 0o700)
    files = [data / "secret_key", data / "hearth.sqlite3", *sorted((data / "logs").glob("*.log"))]
    assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
    assert len(files) >= 5  # the key, the database, and the web, worker and beat logs
    worker = int((data / "worker.pid").read_text())
    os.kill(worker, signal.SIGKILL)
    time.sleep(1)
    assert len(beats(data)) == 1, "the worker's death took or added a beat"
    again = up(env)  # make up again, as an admin would after a crash
    # a restart stops the web server after beat and the workers (the API answers meanwhile), and says what it stopped
    stopped = re.findall(r"^up: restart: stopped (\S+) \(\d+\)$", again, re.MULTILINE)
    assert stopped == ["worker-long", "beat", "web", "redis"], again
    deadline = time.monotonic() + 20
    while len(beats(data)) != 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(beats(data)) == 1
    subprocess.run(["bash", "scripts/down.sh"], cwd=ROOT, env=env, capture_output=True, check=True)
    assert beats(data) == []
