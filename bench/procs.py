"""Processes for ``gateway_overhead.py``: the engine (simulator or fake), Hearth's web server and its database,
/proc readings.

Every process is started with ``start`` and must be ended with ``stop``; the caller keeps the list.
"""

import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Content chunks per measured answer (max_tokens; answers are drawn around it, up to twice it): 64, or
# BENCH_ANSWER_CHUNKS (1-128, the fake engine's MAX_CHUNKS / 2). Two runs at two lengths split the relay's CPU
# into a cost per request and one per chunk (bench/README.md).
CHUNKS = int(os.environ.get("BENCH_ANSWER_CHUNKS", "64"))
if not 1 <= CHUNKS <= 128:
    raise SystemExit(f"BENCH_ANSWER_CHUNKS must be 1 to 128, not {CHUNKS}")
DECODE_MS = 10  # ms between chunks, both engines


def hearth_env(tmp: Path, redis_url: str) -> dict[str, str]:
    """This process's environment with Hearth's for a bench run: not DEBUG, a fresh SECRET_KEY, ``redis_url``, a
    throwaway SQLite database and the data folder in ``tmp``, the appliance's settings, output unbuffered."""
    return {
        **os.environ,
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "REDIS_URL": redis_url,
        "DATABASE_URL": f"sqlite:///{tmp / 'bench.sqlite3'}",
        "HEARTH_DATA_DIR": str(tmp),
        "DJANGO_SETTINGS_MODULE": "appliance.settings",
        "PYTHONUNBUFFERED": "1",
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(argv: list[str], log: Path, env: dict[str, str], cwd: Path = ROOT) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own process group (so ``stop`` reaches any children it forks), output to ``log``."""
    return subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process's group, then SIGKILL it after 10 s."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 15)
        except ProcessLookupError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
    else:  # the leader is gone; children it forked may not be
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass


CONSOLE = b"appliance.console_asgi"  # appliance.web_server's console process: it relays nothing


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a proxy that forks workers is measured whole), but not Hearth's console
    process and its own: the relay's CPU and memory are what a relayed chunk or stream costs."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            if CONSOLE in Path(f"/proc/{p}/cmdline").read_bytes():
                continue
        except (FileNotFoundError, ProcessLookupError):
            continue
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def proc_stats(pid: int) -> tuple[float, float, float]:
    """(CPU seconds used so far, resident MB, the kernel's part of those CPU seconds) of a process and its
    descendants, from /proc (utime + stime, VmRSS, stime)."""
    cpu, rss_kb, kernel = 0.0, 0, 0.0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{p}/status").read_text().splitlines()
        except (FileNotFoundError, ProcessLookupError):
            continue
        cpu += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        kernel += int(fields[12]) / os.sysconf("SC_CLK_TCK")
        rss_kb += next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0)
    return cpu, rss_kb / 1024, kernel


def engine_argv(kind: str, port: int) -> list[str]:
    """The engine: Hearth's simulator (``engines.simulator``) or the lean ``fake_upstream.py``.

    Simulator: one engine step every DECODE_MS with no per-sequence cost and prefill at 1M tokens/s, so
    the first chunk comes ~10 ms after arrival and then one per step; answers are planned at
    ``natural`` 1000 ± 50 % tokens, so ``max_tokens`` always cuts them at exactly CHUNKS ("length").
    """
    if kind == "fake":
        return [sys.executable, str(ROOT / "bench/fake_upstream.py"), str(port)]
    return [
        sys.executable,
        "-m",
        "engines.simulator",
        "--model",
        "bench",
        "--served-model-name",
        "bench",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-num-seqs",
        "1024",
        "--kv-cache-tokens",
        "4000000",
        "--max-model-len",
        "4096",
        "--decode-ms-per-token",
        str(DECODE_MS),
        "--decode-ms-per-seq",
        "0",
        "--prefill-tokens-per-s",
        "1000000",
        "--natural-output-tokens",
        "1000",
        "--no-enable-prefix-caching",
    ]


def web_argv(port: int, workers: int = 0) -> list[str]:
    """Hearth's web server: with ``workers`` 0, uvicorn with uvloop and httptools in one process; else as the
    appliance runs it, ``python -m appliance.web_server`` (the caller sets HEARTH_WEB_WORKERS)."""
    if workers:
        return [sys.executable, "-m", "appliance.web_server", "--host", "127.0.0.1", "--port", str(port)]
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "appliance.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--loop",
        "uvloop",
        "--http",
        "httptools",
        "--no-access-log",
    ]


def seed(upstream_port: int) -> str:
    """Rows for one ready deployment "bench" routed to the engine; returns a new API key."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
    sys.path.insert(0, str(ROOT))
    django.setup()
    from console.access.keys import create_key
    from console.catalog.models import ModelSource
    from console.deployments.models import Deployment, DeploymentState, Replica
    from console.fanout import bump_routing_version

    source = ModelSource.objects.create(name="bench", kind="local", path="/nonexistent", config={}, weights_bytes=0)
    deployment = Deployment.objects.create(
        name="bench",
        model=source,
        engine="vllm",
        served_model_name="bench",
        max_model_len=4096,
        kv_space_gib=1.0,
        plan={},
        state=DeploymentState.READY,
    )
    Replica.objects.create(
        deployment=deployment,
        runtime="process",
        runtime_name="bench-engine",
        host="127.0.0.1",
        port=upstream_port,
        engine_api_key=secrets.token_hex(16),
        running=True,
        ready_at=deployment.created_at,
    )
    _, key = create_key("bench", None)
    bump_routing_version()
    return str(key)


def fresh_database(url: str) -> str:
    """``url`` (postgres://…/NAME) after dropping and creating NAME again, or "" for no URL. Raises SystemExit
    for a name without "bench" in it: this drops the database."""
    if not url:
        return ""
    base, _, name = url.rpartition("/")
    if "bench" not in name:
        raise SystemExit(f"--database-url: {name!r} has no 'bench' in its name; it would be dropped")
    import psycopg

    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return url
