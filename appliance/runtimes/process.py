"""The process runtime: engines as local subprocesses (no Docker, no GPUs: laptops, CI, the demo).

Each engine runs in its own session (process group) so that stopping it ends its children too, and
so that a worker restart leaves it running for reconcile to find. Files under ``root``:
``NAME.pid``, ``NAME.log`` (stdout+stderr; an earlier run's under the same name moves to
``NAME.previous.log``), ``NAME.exit`` (exit code, written whole by a reaper thread in the process that started it;
that process's ``status`` waits for its reaper, so an engine it started never reads as ended without its code),
``NAME.argv`` (what it was started with). A running engine is adopted only when its argv is the one asked
for; one of ours from another life (a reset database reuses replica ids) is ended, and a recycled pid that
is not ours is left alone.
The folder is 0700 and the files 0600 (engine logs may quote prompts).

An engine gets its spec's environment over an allow-list of the worker's (ENGINE_ENV, plus the names
in ``passed``, HEARTH_ENGINE_ENV), never the whole of it: no SECRET_KEY(_FILE), REDIS_URL or DATABASE_URL.
"""

import contextlib
import itertools
import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from appliance.runtimes.base import RuntimeError_, RuntimeStatus, Started
from engines.launch import LaunchSpec

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def engine_port(host: str) -> int:
    """A free TCP port on ``host`` for an engine this runtime starts. Above the kernel's ephemeral range where
    there is room (EPHEMERAL_RANGE, e.g. 32768-60999 → 61000-65535): a port in that range can be taken by an
    outgoing connection while the engine loads, before it binds it (SGLang binds its HTTP port only after
    loading the model; a test run saw it fail so, then hang for minutes: console.deployments.watching ends such an
    engine at its next poll, from its log). Else, or where the range cannot be read, a port the kernel picks.
    Raises OSError when ``host`` is not an address of this machine."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[1]) + 1
    except (OSError, ValueError, IndexError):
        low = 65_536
    first = low + secrets.randbelow(max(65_536 - low, 1))
    for port in itertools.chain(range(first, 65_536), range(low, first)):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# What a local engine may take from the worker's environment: the basics of a process (where programs
# and home are, language, time zone, temp folder), libraries and GPUs, network proxies and certificates,
# and the Hugging Face cache and mode. Everything else a launch needs is in its spec.
ENGINE_ENV = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TERM",
        "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_ENDPOINT",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
    }
)
ENGINE_ENV_PREFIXES = ("LC_",)  # locale categories


def engine_environment(
    worker: Mapping[str, str], spec_env: Mapping[str, str], passed: Sequence[str] = ()
) -> dict[str, str]:
    """The environment of a local engine: the allow-listed part of ``worker``'s, then ``spec_env``."""
    allowed = ENGINE_ENV | set(passed)
    kept = {k: v for k, v in worker.items() if k in allowed or k.startswith(ENGINE_ENV_PREFIXES)}
    return {**kept, **spec_env}


REAPER_WAIT_SECONDS = 5.0  # how long ``status`` waits for an ended engine's reaper to write its code
# each engine this process started: its exit file → the thread that waits for it and writes its code
_REAPERS: dict[Path, threading.Thread] = {}


class ProcessRuntime:
    name = "process"

    def __init__(self, root: Path, passed_env: Sequence[str] = (), prefix: str = "") -> None:
        """``prefix``: how this appliance's engine names begin; ``names`` lists only those."""
        self.root = root
        self.passed_env = tuple(passed_env)
        self.prefix = prefix

    def _path(self, name: str, suffix: str) -> Path:
        return self.root / f"{name}.{suffix}"

    def prepare(self, spec: LaunchSpec, progress: Callable[[str], None]) -> str:
        return ""  # a local program: nothing to pull

    def start(self, name: str, spec: LaunchSpec) -> Started:
        pid = self._pid(name)
        if pid is not None and self.status(name).running:
            running = _cmdline(pid)
            if running == spec.argv:  # a worker died after starting this very engine: adopt it
                return Started(str(pid), spec.host, spec.port)
            if running == self._argv(name):  # ours under this name from another life (a reset database)
                _end_group(pid, 5.0)
            # else the pid was recycled by a process that is not ours: left alone
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.root.chmod(0o700)
        for suffix in ("exit", "exit.part", "pid", "argv"):
            self._path(name, suffix).unlink(missing_ok=True)
        env = engine_environment(os.environ, spec.env, self.passed_env)
        log_path = self._path(name, "log")
        if log_path.exists():  # a name used before (a reset database): keep that run's log apart, not mixed in
            log_path.replace(self._path(name, "previous.log"))
        log = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")
        try:
            proc = subprocess.Popen(  # noqa: S603 - argv built by engines.*, never a shell
                spec.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                cwd=self.root,
            )
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in an argument
            raise RuntimeError_(f"could not start {spec.argv[0]}: {getattr(exc, 'strerror', None) or exc}") from None
        finally:
            log.close()
        self._path(name, "pid").write_text(str(proc.pid))
        self._path(name, "argv").write_text(json.dumps(spec.argv))  # holds no key: keys go in the environment
        reaper = threading.Thread(target=self._reap, args=(proc, name), daemon=True)
        _REAPERS[self._path(name, "exit")] = reaper
        reaper.start()
        return Started(str(proc.pid), spec.host, spec.port)

    def _reap(self, proc: subprocess.Popen[bytes], name: str) -> None:
        code = proc.wait()
        written = self._path(name, "exit.part")
        written.write_text(str(code))
        exit_file = self._path(name, "exit")
        written.replace(exit_file)  # whole or not there: a reader never finds it empty
        if _REAPERS.get(exit_file) is threading.current_thread():
            del _REAPERS[exit_file]

    def _pid(self, name: str) -> int | None:
        try:
            return int(self._path(name, "pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _argv(self, name: str) -> list[str] | None:
        try:
            argv: list[str] = json.loads(self._path(name, "argv").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return argv

    def _exit_code(self, name: str) -> int | None:
        try:
            return int(self._path(name, "exit").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def status(self, name: str) -> RuntimeStatus:
        code = self._exit_code(name)
        pid = self._pid(name)
        if code is None and pid is not None and _alive(pid):
            return RuntimeStatus(running=True)
        reaper = _REAPERS.get(self._path(name, "exit"))
        if code is None and reaper is not None:  # ended, its code not written yet: the reaper is at it (a CI run
            reaper.join(REAPER_WAIT_SECONDS)  # read it between the two, and the Log tab said "exit code unknown")
        if code is None:
            code = self._exit_code(name)  # written since the first look (its reaper done and forgotten)
        return RuntimeStatus(running=False, exit_code=code)

    def stop(self, name: str, grace_seconds: float = 10.0) -> RuntimeStatus:
        """End the engine's whole process group, also when its leader has already exited: engines such as
        vLLM leave children (EngineCore, workers) behind otherwise."""
        pid = self._pid(name)
        if pid is not None:
            _end_group(pid, grace_seconds)
        status = self.status(name)
        self._path(name, "pid").unlink(missing_ok=True)
        return RuntimeStatus(running=False, exit_code=status.exit_code, oom_killed=status.oom_killed)

    def logs(self, name: str, lines: int = 50) -> str:
        try:
            with self._path(name, "log").open("rb") as f:
                return b"".join(deque(f, maxlen=lines)).decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def names(self) -> set[str]:
        return {path.name.removesuffix(".pid") for path in self.root.glob(f"{self.prefix}*.pid")}


def _cmdline(pid: int) -> list[str] | None:
    """The argv process ``pid`` runs, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode("utf-8", "surrogateescape").split("\0")[:-1]


def _group_alive(pgid: int) -> bool:
    """True while any process of the group is alive (zombies aside)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _end_group(pgid: int, grace_seconds: float) -> None:
    """SIGTERM the process group, then SIGKILL what is left after ``grace_seconds``."""
    for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + wait
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _group_alive(pgid):
            return


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an exited child its parent has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
