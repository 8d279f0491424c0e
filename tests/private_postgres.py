"""A PostgreSQL server of a test's own, which the test really stops and starts: Debian's PostgreSQL binaries
(/usr/lib/postgresql/<version>/bin, the newest installed) run as the ``postgres`` user (initdb and postgres refuse
to run as root), its data folder on a tmpfs of its own (``disk``) that a test can fill, its database migrated
as `manage.py migrate` does, and the test process's Django connection pointed at it while a block runs."""

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
from django.db import connection

from tests.conftest import ROOT, Proc, free_port

BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))[-1]


class PrivatePostgres:
    """A PostgreSQL server on a free port of 127.0.0.1 whose data folder lies on a tmpfs of ``disk_mib`` MiB
    mounted at ``disk`` (under a folder of /tmp owned by ``postgres``: pytest's folders are root's, mode 0700),
    holding the database ``name`` migrated to today's schema; its log is ``log``. ``env``: the environment of
    `manage.py migrate` (tests.conftest's live_env)."""

    def __init__(self, name: str, log: Path, env: dict[str, str], disk_mib: int) -> None:
        self.name, self.port = name, free_port()
        owner = pwd.getpwnam("postgres")
        self.home = Path(tempfile.mkdtemp(prefix="hearth-postgres-"))
        os.chown(self.home, owner.pw_uid, owner.pw_gid)
        self.disk = self.home / "disk"
        self.disk.mkdir()
        options = f"size={disk_mib}m,mode=0700,uid={owner.pw_uid},gid={owner.pw_gid}"
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(self.disk)], check=True)
        data = self.disk / "pgdata"
        initdb = [str(BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"]
        subprocess.run(_as_postgres(initdb), check=True, capture_output=True, env=env)
        argv = [str(BIN / "postgres"), "-D", str(data), "-p", str(self.port), "-k", str(self.home)]
        self.proc = Proc(_as_postgres([*argv, "-c", "listen_addresses=127.0.0.1"]), env, log)
        self._wait()
        with self._admin() as db:
            db.execute(f'CREATE DATABASE "{name}"')
        migrate = [sys.executable, "manage.py", "migrate", "--noinput", "-v0"]
        subprocess.run(migrate, cwd=ROOT, env={**env, "DATABASE_URL": self.url}, check=True)

    @property
    def url(self) -> str:
        """The database's URL, as DATABASE_URL takes it."""
        return f"postgres://postgres@127.0.0.1:{self.port}/{self.name}"

    def stop(self) -> None:
        """A fast shutdown (SIGINT: open sessions are ended, as `pg_ctl stop -m fast`), waited for."""
        self.proc.proc.send_signal(signal.SIGINT)
        self.proc.proc.wait(60)

    def start(self) -> None:
        """The server started again on the same folder and port, once it takes connections."""
        self.proc.restart()
        self._wait()

    def checkpoint(self) -> None:
        """A CHECKPOINT: what the WAL holds is written out, and old WAL segments are recycled for the next."""
        with self._admin() as db:
            db.execute("CHECKPOINT")

    def close(self) -> None:
        """The server stopped, its tmpfs unmounted and its folder removed."""
        if self.proc.proc.poll() is None:
            self.stop()
        subprocess.run(["umount", "-l", str(self.disk)], check=True)
        shutil.rmtree(self.home)

    def _admin(self) -> psycopg.Connection:
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True)

    def _wait(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                with self._admin():
                    return
            except psycopg.OperationalError:
                assert self.proc.proc.poll() is None and time.monotonic() < deadline, self.proc.output()[-3000:]
                time.sleep(0.2)


def _as_postgres(argv: list[str]) -> list[str]:
    """``argv`` run as the postgres user; setpriv execs it, so the process started is the command itself."""
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--reset-env", *argv]


@contextlib.contextmanager
def django_on(server: PrivatePostgres) -> Iterator[None]:
    """The test process's Django connection on ``server``'s database while the block runs (the server's database
    has the test database's name); call ``connection.close()`` after a restart, to connect afresh."""
    saved = connection.settings_dict["HOST"], connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=server.port)
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(HOST=saved[0], PORT=saved[1])
