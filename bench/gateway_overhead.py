"""What a gateway's streaming relay costs: the same load direct to an engine, through Hearth, LiteLLM and nginx.

Usage: ``.venv/bin/python bench/gateway_overhead.py [--upstream simulator|fake] [--peers litellm,nginx|none]
[--pattern steady|burst] [--streams 1,64,256] [--repeat 2] [--min-samples 16] [--hold 512] [--compare DIR]
[--markdown]``

Starts on 127.0.0.1 the engine (Hearth's simulator, or the lean ``fake_upstream.py``), the appliance's
real web server (``uvicorn appliance.asgi:application`` with uvloop and httptools) on a throwaway SQLite
database seeded with a ready deployment routed to the engine and an API key, LiteLLM's proxy in its
own venv (``litellm_peer.py``) and nginx 1.22 from Debian's package (``nginx_peer.py``). First it
measures each gateway's memory per 1,000 open streams, then for each concurrency level and repetition
runs N concurrent streaming chats on every path, in an order that rotates per repetition: N clients in a
closed loop (``steady``), or rounds of N sent at once (``burst``). The load generator runs here
(``loadgen.py``), in no server's process. Prints a table and verdicts against the issues' targets
(``report.py``: issue 17's, and with nginx issue 35's ratios to it); asserts nothing. Answers hold 64
chunks on average, or BENCH_ANSWER_CHUNKS (bench/procs.py). Needs Redis at 127.0.0.1:6379 (uses db 10
and flushes it at the end). Stops everything it started, even on error.
"""

import argparse
import asyncio
import math
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import dashboard_load
import litellm_peer
import nginx_peer
import redis
import report
import uvloop
from loadgen import WARMUP, Held, hold, measure, one, wait_ready
from procs import ROOT, engine_argv, free_port, fresh_database, hearth_env, seed, start, stop, web_argv

REDIS_URL = "redis://127.0.0.1:6379/10"  # the default of --redis-url
DASHBOARD = "hearth+dashboard"  # the path measured while a console user refreshes the dashboard
BASE = "hearth@base"  # --compare: Hearth from another checkout, the same run's baseline for a change
# splice: not a gateway, the floor of a Python relay; splice-watch: that floor with the stream read as Hearth must
PEERS = ("litellm", "nginx", "splice", "splice-watch")


class Setup:
    """Where each path is: base URL, request headers, and the process to watch (None for direct)."""

    def __init__(self) -> None:
        self.console: tuple[dict[str, str], int] | None = None  # --dashboard: session cookie, deployment id
        self.urls: dict[str, str] = {}
        self.headers: dict[str, dict[str, str]] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.skipped: dict[str, str] = {}  # peer → why it is not in this run

    def add(self, path: str, port: int, key: str, proc: subprocess.Popen[bytes]) -> None:
        self.urls[path] = f"http://127.0.0.1:{port}"
        self.headers[path] = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.procs[path] = proc

    def drop(self, path: str, why: str) -> None:
        self.skipped[path] = why
        for table in (self.urls, self.headers):
            table.pop(path, None)
        if path in self.procs:
            stop(self.procs.pop(path))

    @property
    def paths(self) -> list[str]:
        return list(self.urls)


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def ready(setup: Setup, sessions: dict[str, aiohttp.ClientSession]) -> None:
    def has_bench(b: bytes) -> bool:
        return b"bench" in b

    def answered(_: bytes) -> bool:
        return True

    await wait_ready(sessions["direct"], setup.urls["direct"] + "/health", setup.procs["direct"], 60)
    await wait_ready(sessions["hearth"], setup.urls["hearth"] + "/v1/models", setup.procs["hearth"], 60, has_bench)
    # LiteLLM answers /v1/models itself; nginx relays the engine's /health (the fake engine has no /v1/models)
    waits = (("litellm", "/v1/models", 180, has_bench), ("nginx", "/health", 30, answered))
    splices = (("splice", "/health", 30, answered), ("splice-watch", "/health", 30, answered))
    for peer, page, wait, check in (*waits, *splices):
        if peer in setup.urls:
            try:
                await wait_ready(sessions[peer], setup.urls[peer] + page, setup.procs[peer], wait, check)
            except RuntimeError as exc:
                setup.drop(peer, f"did not get ready: {exc}")


async def memory(
    args: argparse.Namespace, setup: Setup, sessions: dict[str, aiohttp.ClientSession]
) -> dict[str, Held | str]:
    held: dict[str, Held | str] = {}
    for path in setup.paths[1:]:
        if path == DASHBOARD:
            continue  # the same process as hearth
        url = setup.urls[path] + "/v1/chat/completions"
        await asyncio.gather(*(one(sessions[path], url, WARMUP, 1) for _ in range(8)))
        note(f"  memory: holding {args.hold} streams open through {path}")
        held[path] = await hold(
            url, setup.headers[path], args.hold, setup.procs[path].pid, args.hold_deadline, args.hold_to_end
        )
    held.update(setup.skipped)
    return held


async def bench(args: argparse.Namespace, setup: Setup) -> tuple[list[report.Row], dict[str, Held | str]]:
    timeout = aiohttp.ClientTimeout(total=args.request_timeout)
    sessions = {
        # keepalive under uvicorn's 5 s, so the client never reuses a connection the server is closing
        path: aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=4), headers=setup.headers[path], timeout=timeout
        )
        for path in setup.paths
    }
    try:
        await ready(setup, sessions)
        held = await memory(args, setup, sessions) if args.hold else {}
        rows, refreshes = [], []
        for n in args.streams:
            rounds = max(2 if args.pattern == "burst" else 3, math.ceil(args.min_samples / n))
            for rep in range(1, args.repeat + 1):
                paths = setup.paths
                order = paths[(rep - 1) % len(paths) :] + paths[: (rep - 1) % len(paths)]
                runs = {}
                for path in order:
                    proc = setup.procs[path] if path != "direct" else None
                    url = setup.urls[path] + "/v1/chat/completions"
                    refreshing = with_dashboard(setup, args.viewers) if path == DASHBOARD else None
                    runs[path] = await measure(
                        sessions[path], url, n, rounds, proc.pid if proc else None, args.pattern, seed=n * 1000 + rep
                    )
                    if refreshing is not None:
                        refreshes.append(await refreshing())
                rows.append(report.Row(n, rep, {p: runs[p] for p in paths}))
                note(f"  {n} streams, repetition {rep} ({' → '.join(order)}): done")
        if refreshes:
            took = sorted(t for run in refreshes for t in run)
            note(
                f"  dashboard: {len(took)} refreshes, p50 {took[len(took) // 2] * 1000:.0f} ms, "
                f"max {took[-1] * 1000:.0f} ms (/, /dashboard/live/ and the panel, one after the other)"
            )
        return rows, held
    finally:
        for session in sessions.values():
            await session.close()


def with_dashboard(setup: Setup, viewers: int) -> Callable[[], Awaitable[list[float]]]:
    """Start ``viewers`` console users' refreshes (dashboard_load.refresh, each its own session) on this
    loop; the returned coroutine function stops them and gives every refresh's seconds."""
    assert setup.console is not None
    stop = asyncio.Event()
    tasks = [
        asyncio.ensure_future(dashboard_load.refresh(setup.urls[DASHBOARD], *setup.console, stop))
        for _ in range(viewers)
    ]

    async def done() -> list[float]:
        stop.set()
        return [t for took in await asyncio.gather(*tasks) for t in took]

    return done


def log_notes(name: str, log: Path) -> str:
    """A server's exceptions and relay warnings, counted, so errors and truncations show in the report."""
    notable = re.compile(
        r"^[\w.]+(Error|Exception)\b|truncated stream|stream from .* broke|WARNING|ERROR|\[(warn|error|crit|alert)\]"
    )
    lines = [ln[:200] for ln in log.read_text(errors="replace").splitlines() if notable.search(ln)]
    if not lines:
        return f"{name} log: no exceptions or warnings"
    counts = Counter(lines).most_common(5)
    return f"{name} log:\n" + "\n".join(f"  {n} × {line}" for line, n in counts)


def start_litellm(setup: Setup, tmp: Path, engine_port: int) -> None:
    why = litellm_peer.ensure_venv()
    if why:
        setup.skipped["litellm"] = why
        return
    port, key = free_port(), "sk-bench-" + secrets.token_hex(16)
    argv, env = litellm_peer.argv_env(tmp, engine_port, port, key)
    try:
        setup.add("litellm", port, key, start(argv, tmp / "litellm.log", env, cwd=tmp))
    except OSError as exc:
        setup.skipped["litellm"] = f"could not start: {exc}"


def start_nginx(setup: Setup, tmp: Path, engine_port: int) -> None:
    why = nginx_peer.ensure()
    if why:
        setup.skipped["nginx"] = why
        return
    port = free_port()
    argv, env = nginx_peer.argv_env(tmp, engine_port, port)
    try:
        setup.add("nginx", port, "anything", start(argv, tmp / "nginx.log", env, cwd=tmp))
    except OSError as exc:
        setup.skipped["nginx"] = f"could not start: {exc}"


def start_splice(setup: Setup, tmp: Path, engine_port: int, name: str = "splice") -> None:
    """``name`` "splice", or "splice-watch" (``splice_peer.py --watch``)."""
    port = free_port()
    argv = [sys.executable, str(ROOT / "bench/splice_peer.py"), str(port), str(engine_port)]
    argv += ["--watch"] if name == "splice-watch" else []
    try:
        setup.add(name, port, "anything", start(argv, tmp / f"{name}.log", dict(os.environ)))
    except OSError as exc:
        setup.skipped[name] = f"could not start: {exc}"


def peers(text: str) -> list[str]:
    """``--peers``: a comma-separated list of PEERS, or "none"."""
    names = [] if text == "none" else [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in PEERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peer {', '.join(unknown)}: give {', '.join(PEERS)} or none")
    return list(dict.fromkeys(names))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--upstream",
        choices=["simulator", "fake"],
        default="simulator",
        help="the engine: Hearth's simulator (default) or the lean fake_upstream.py",
    )
    parser.add_argument(
        "--peers",
        default="litellm,nginx",
        type=peers,
        help=f"peer gateways to include, comma-separated: {', '.join(PEERS)} (default litellm,nginx), or none",
    )
    parser.add_argument("--streams", default="1,64,256", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument(
        "--pattern",
        choices=["steady", "burst"],
        default="steady",
        help="steady: N clients in a closed loop (default); burst: N at once, in rounds",
    )
    parser.add_argument("--repeat", default=2, type=int, help="repetitions per level (default 2)")
    parser.add_argument("--min-samples", default=16, type=int, help="requests per path and repetition, at least")
    parser.add_argument("--hold", default=512, type=int, help="streams held open for the memory figure (0: skip)")
    parser.add_argument(
        "--hold-to-end",
        action="store_true",
        help="read held streams to their end (~60 s), counting errors, not dropping them",
    )
    parser.add_argument("--hold-deadline", default=25.0, type=float, help="seconds to wait for them to open")
    parser.add_argument("--request-timeout", default=240.0, type=float, help="seconds for one request, in all")
    parser.add_argument("--markdown", action="store_true", help="also print the table in Markdown")
    parser.add_argument(
        "--dashboard", action="store_true", help=f"add a path {DASHBOARD!r}: Hearth while a console user refreshes it"
    )
    parser.add_argument(
        "--viewers", default=1, type=int, help="console users refreshing at once, with --dashboard (default 1)"
    )
    parser.add_argument(
        "--history-hours",
        default=24.0,
        type=float,
        help="hours of history the dashboard reads, with --dashboard (default 24)",
    )
    parser.add_argument(
        "--web-workers",
        default=0,
        type=int,
        help="0: one uvicorn process (default); N: appliance.web_server, N workers",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        help="another checkout of Hearth (a git worktree of the commit before a change): its web server runs beside "
        "this one's, on the same database, Redis (its own keys) and engine, as the path 'hearth@base', measured in the "
        "same run",
    )
    parser.add_argument(
        "--database-url",
        default="",
        help="a PostgreSQL database whose name has 'bench' in it, dropped and made again (default: "
        "a throwaway SQLite file)",
    )
    parser.add_argument("--redis-url", default=REDIS_URL, help=f"Redis database to use and flush (default {REDIS_URL})")
    return parser.parse_args()


def main() -> None:
    args = parse()
    tmp = Path(tempfile.mkdtemp(prefix="hearth-bench-"))
    env = hearth_env(tmp, args.redis_url)
    if args.database_url:
        env["DATABASE_URL"] = fresh_database(args.database_url)
    os.environ.update(env)
    setup = Setup()
    all_procs: list[tuple[str, subprocess.Popen[bytes]]] = []
    try:
        engine_port, web_port = free_port(), free_port()
        engine = start(engine_argv(args.upstream, engine_port), tmp / "engine.log", env)
        all_procs.append(("engine", engine))
        setup.add("direct", engine_port, "anything", engine)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        key = seed(engine_port)
        if args.dashboard:
            note(f"  dashboard: seeding {args.history_hours:g} h of history")
            setup.console = dashboard_load.seed_console(args.history_hours)
        web_env = {**env, "HEARTH_WEB_WORKERS": str(args.web_workers)} if args.web_workers else env
        web = start(web_argv(web_port, args.web_workers), tmp / "web.log", web_env)
        all_procs.append(("web", web))
        setup.add("hearth", web_port, key, web)
        if args.dashboard:
            setup.add(DASHBOARD, web_port, key, web)
        if args.compare:
            base_port = free_port()
            base_argv = web_argv(base_port, args.web_workers)  # the same layout as the checkout under test
            # its own Redis keys: each process's request-log rows written by its own spool writer, not shared
            base_env = {**web_env, "HEARTH_INSTANCE": "bench-base"}
            base = start(base_argv, tmp / "web-base.log", base_env, cwd=args.compare.resolve())
            all_procs.append(("web@base", base))
            setup.add(BASE, base_port, key, base)
        if "litellm" in args.peers:
            start_litellm(setup, tmp, engine_port)
            if "litellm" in setup.procs:
                all_procs.append(("litellm", setup.procs["litellm"]))
                note(f"  LiteLLM {litellm_peer.version()} starting (it takes 10–30 s)")
        if "nginx" in args.peers:
            start_nginx(setup, tmp, engine_port)
            if "nginx" in setup.procs:
                all_procs.append(("nginx", setup.procs["nginx"]))
                note(f"  nginx {nginx_peer.version()} starting")
        for splice in ("splice", "splice-watch"):
            if splice in args.peers:
                start_splice(setup, tmp, engine_port, splice)
                if splice in setup.procs:
                    all_procs.append((splice, setup.procs[splice]))
        rows, held = uvloop.run(bench(args, setup))
        cells = report.pool(rows, setup.paths)
        print(
            f"engine: {args.upstream}; pattern: {args.pattern}; paths: {', '.join(setup.paths)}; "
            f"repetitions {args.repeat}"
        )
        for peer, why in setup.skipped.items():
            print(f"{peer.upper()}: NOT IN THIS RUN: {why}")
        print(report.table(cells, markdown=False))
        print("memory per 1,000 open streams (RSS with them open minus idle, scaled):")
        print("\n".join("  " + line for line in report.memory(held)))
        print(report.verdict(cells, [p for p in setup.paths if p in PEERS]))
        if "nginx" in args.peers:
            print(report.nginx_verdict(cells))
        if "splice" in args.peers or "splice-watch" in args.peers:
            print(report.splice_floor(cells))
        if args.dashboard:
            print(report.dashboard_verdict(cells, DASHBOARD, args.viewers))
        if args.markdown:
            print("\n" + report.table(cells, markdown=True) + "\n")
            print("\n".join("- " + line for line in report.memory(held)))
    finally:
        for _, proc in reversed(all_procs):
            stop(proc)
        logs = (("web server", "web.log"), ("base web server", "web-base.log"), ("litellm", "litellm.log"))
        logs += (("nginx", "nginx/error.log"),)
        for name, log in ((name, tmp / file) for name, file in logs):
            if log.exists():
                print(log_notes(name, log))
        if "litellm" in setup.skipped or "litellm" in setup.urls:
            print(f"LiteLLM: {litellm_peer.version()} from {litellm_peer.VENV}")
        if "nginx" in setup.skipped or "nginx" in setup.urls:
            print(f"nginx: {nginx_peer.version()} (Debian's package) from {nginx_peer.DIR}")
        redis.Redis.from_url(args.redis_url).flushdb()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
