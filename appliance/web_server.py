"""The web processes: uvicorn serving appliance.asgi with HEARTH_WEB_WORKERS relay processes on one socket,
and the console's own uvicorn (appliance.console_asgi, HEARTH_CONSOLE_WORKERS processes) behind them.

``python -m appliance.web_server --host H --port P`` (scripts/up.sh, compose.yaml and the image run it).
The console listens on a unix socket in a fresh 0700 folder, never on a port; the relay processes find it
in HEARTH_CONSOLE_SOCKET and forward every non-gateway request to it (appliance.console_proxy says why). It
is started first and waited for, restarted if it dies while the relays run (an exit that is not 0: uvicorn
exits 0 only when asked to stop), and stopped after the relays have drained their streams.
What the processes share lives in Redis and the database (quotas, concurrency, key and route changes, the
request log); their Prometheus metrics are summed through prometheus-client's multiprocess mode: each
process writes its samples under PROMETHEUS_MULTIPROC_DIR (set here, before any worker imports the client,
to ``DATA_DIR/run/prometheus`` unless given) and /metrics reads them all (gateway.metrics_endpoint.metrics_app). The
folder is emptied at each start: counters begin again at 0, which Prometheus reads as a restart.

Imports Django's settings, appliance.orphan_watch and appliance.relay_supervision only (never the app: each worker
imports it itself).
"""

import argparse
import copy
import json
import logging
import logging.config
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
import uvicorn.config

from appliance import relay_supervision
from appliance.datafiles import keep_data_dir_private
from appliance.orphan_watch import SUPERVISOR_ENV

log = logging.getLogger("appliance.web_server")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client.values reads it at import
# The console yields the CPU to the relays, engines and workers whenever they want it: a page built on a
# busy core waits, not a stream. Measured on 2 cores, 64 streams and 4 viewers refreshing every second
# (bench/gateway_overhead.py --dashboard --viewers 4): added TTFT p99 +12.6 ms at 10 against +30.3 ms at 0,
# p50 +0.5 against +0.3 ms, the refresh p50 380 against 322 ms.
CONSOLE_NICENESS = 10
# the exit codes of a console uvicorn ended on a stop signal (it raises the signal again once drained)
ASKED_TO_STOP = frozenset({-signal.SIGTERM, -signal.SIGINT})
# Django's start, with every app imported, takes ~3 s on an idle box; at CONSOLE_NICENESS on 2 cores loaded by a test
# run's engines it took over 60 s (test_one_beat and make up failed so), and the wait costs nothing when it is quick
CONSOLE_START_SECONDS = 180.0
# Seconds an idle client connection is kept open: longer than the idle expiry of the clients that reuse connections
# (httpx, and so the OpenAI and Anthropic SDKs: 5 s), as console_proxy keeps its own below the console's. With
# uvicorn's default, also 5 s, the two close at the same moment, and a request a client sends on a connection the
# server is closing is lost unanswered ("Server disconnected without sending a response", or a reset): the likely
# cause of the 1-2 requests in ~2,600 lost under a CPU hog in test_soak_load's SQLite run; nginx keeps 75 s.
KEEP_ALIVE_SECONDS = 75


def uvicorn_logging(line_format: str) -> dict[str, Any]:
    """uvicorn's logging configuration (uvicorn.config.LOGGING_CONFIG) with its lines in ``line_format``."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["formatters"]["default"] = {"format": line_format}
    return config


def metrics_folder(data_dir: Path) -> Path:
    """An empty folder for the processes' metric files: PROMETHEUS_MULTIPROC_DIR when set, else
    ``data_dir/run/prometheus`` (made 0700). Returns the folder, also exported in PROMETHEUS_MULTIPROC_DIR."""
    folder = Path(os.environ.get(MULTIPROC_ENV) or data_dir / "run" / "prometheus")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, mode=0o700)
    os.environ[MULTIPROC_ENV] = str(folder)
    return folder


def remove_stale_console_folders(root: Path | None = None) -> list[Path]:
    """Remove what web servers killed outright left in ``root`` (default the temp folder): ``hearth-console-*``
    folders of this user, older than CONSOLE_START_SECONDS (so not one starting now), whose socket is gone or
    takes no connection. Returns the folders removed."""
    removed = []
    for folder in (root or Path(tempfile.gettempdir())).glob("hearth-console-*"):
        try:
            info = folder.stat()
        except OSError:
            continue
        if info.st_uid != os.getuid() or time.time() - info.st_mtime < CONSOLE_START_SECONDS:
            continue
        if not _accepts(str(folder / "console.sock")):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _accepts(path: str) -> bool:
    """Whether a unix socket at ``path`` takes a connection."""
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
        return True


class ConsoleServer:
    """The console's uvicorn on a unix socket (``self.socket``); ``start()`` returns once it accepts
    connections (raises RuntimeError with its exit code if it exits first, or after CONSOLE_START_SECONDS)."""

    def __init__(self, workers: int, drain_seconds: int, log_format: str) -> None:
        self.folder = tempfile.mkdtemp(prefix="hearth-console-")  # 0700; short, as unix socket paths must be
        self.socket = os.path.join(self.folder, "console.sock")
        self.drain_seconds = drain_seconds
        log_config = os.path.join(self.folder, "logging.json")
        Path(log_config).write_text(json.dumps(uvicorn_logging(log_format)))
        self.argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "appliance.console_asgi:application",
            "--uds",
            self.socket,
            "--log-config",
            log_config,
            "--workers",
            str(workers),
            "--no-access-log",
            "--no-proxy-headers",
            "--no-server-header",
            "--no-date-header",
            "--timeout-graceful-shutdown",
            str(drain_seconds),
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()  # stop() was called: the console is not started again

    def start(self) -> None:
        self.proc = self._spawn()
        deadline = time.monotonic() + CONSOLE_START_SECONDS
        while not _accepts(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the console process did not start (exit {self.proc.returncode}); see above")
            time.sleep(0.1)
        threading.Thread(target=self._keep, name="console-watch", daemon=True).start()

    def _spawn(self) -> "subprocess.Popen[bytes]":
        proc = subprocess.Popen(self.argv)  # noqa: S603 - our own argv, never a shell
        os.setpriority(os.PRIO_PROCESS, proc.pid, CONSOLE_NICENESS)  # before it starts workers or threads
        return proc

    def _keep(self) -> None:
        """Restart the console when it dies on its own (not 0: a crash, or killed by a signal). One that ended on
        SIGTERM or SIGINT, as uvicorn does after its drain when the whole process group is told to stop (docker
        stop, systemd, Ctrl-C), is started again only if this process is not stopping by the end of its own
        relays' drain, when it stops the console itself."""
        while True:
            assert self.proc is not None
            code = self.proc.wait()
            if code in ASKED_TO_STOP and self._stopped.wait(self.drain_seconds + 5):
                return
            with self._lock:
                if self._stopped.is_set() or code == 0:
                    return
                log.error("the console process exited with %s; starting it again", code)
                time.sleep(1)
                if os.path.exists(self.socket):
                    os.unlink(self.socket)
                self.proc = self._spawn()

    def stop(self) -> None:
        """SIGTERM, its drain to finish, then SIGKILL; the socket's folder removed."""
        self._stopped.set()
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(self.drain_seconds + 5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def _exit(sig: int, frame: object) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    os.environ["HEARTH_PORT"] = str(args.port)  # its processes' settings (appliance.address_policy refuses it)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)  # this process's own lines as the others'
    keep_data_dir_private()
    metrics_folder(settings.DATA_DIR)
    # SIGTERM or SIGINT ends this process through its ``finally`` (the console stopped too): before uvicorn
    # runs, and after, when uvicorn, having drained, restores this handler and raises the signal again.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit)
    os.environ[SUPERVISOR_ENV] = str(os.getpid())  # its processes end with it (appliance.orphan_watch)
    remove_stale_console_folders()
    console = ConsoleServer(settings.HEARTH_CONSOLE_WORKERS, settings.HEARTH_DRAIN_SECONDS, settings.LOG_FORMAT)
    console.start()
    os.environ["HEARTH_CONSOLE_SOCKET"] = console.socket  # the relay processes read it at import
    relay_supervision.install()  # a relay that dies while pinged is replaced at once (its docstring)
    try:
        # proxy_headers off: whether X-Forwarded-* is believed is Django's call (HEARTH_TRUSTED_PROXIES)
        uvicorn.run(
            "appliance.asgi:application",
            host=args.host,
            port=args.port,
            workers=settings.HEARTH_WEB_WORKERS,
            access_log=False,
            proxy_headers=False,
            http="appliance.http_protocol:JsonErrorsHttpToolsProtocol",  # a request it cannot parse: a JSON 400
            timeout_graceful_shutdown=settings.HEARTH_DRAIN_SECONDS,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            # a relay starved of CPU answers its supervisor's ping late: killed, it would cut its open streams
            timeout_worker_healthcheck=settings.HEARTH_WORKER_HEALTHCHECK_SECONDS,
            log_config=uvicorn_logging(settings.LOG_FORMAT),
        )
    finally:
        console.stop()


if __name__ == "__main__":
    main()
