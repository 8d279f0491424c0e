"""How late the relay processes answer while the CPU is taken: the number behind HEARTH_WORKER_HEALTHCHECK_SECONDS
(appliance.relay_supervision).

Usage: ``.venv/bin/python bench/relay_lag.py [--hogs 2] [--streams 64] [--seconds 60] [--workers 2]
[--redis-url redis://127.0.0.1:6379/10]``

Starts the lean fake engine, the appliance's web server with ``--workers`` relay processes on a throwaway SQLite
database (one ready deployment, one key), and ``--hogs`` busy-loop processes; keeps ``--streams`` streaming chats
open in a closed loop for ``--seconds``, and meanwhile asks a relay for ``/health`` every 50 ms: its answer waits
for the relay's event loop, so its latency is the loop's lag (plus a request's own few hundred µs). Prints the
lag's percentiles and maximum, the streams that did not end whole, and what the web log says of late health
check answers (over 2 s) and of relays uvicorn replaced. Asserts nothing. Flushes the Redis database at the end.
"""

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import redis
import uvloop
from loadgen import MEASURED, one, pct, wait_ready
from procs import ROOT, engine_argv, free_port, hearth_env, seed, start, stop, web_argv


async def load(url: str, headers: dict[str, str], streams: int, seconds: float) -> tuple[list[float], int, int]:
    """(``/health`` latencies in seconds, streams ended whole, streams that did not)."""
    lags: list[float] = []
    whole = broken = 0
    deadline = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=streams + 4)
    async with aiohttp.ClientSession(headers=headers, timeout=timeout, connector=connector) as session:

        async def client() -> None:
            nonlocal whole, broken
            while time.monotonic() < deadline:
                sample = await one(session, url + "/v1/chat/completions", MEASURED)
                whole, broken = whole + (sample.error is None), broken + (sample.error is not None)

        async def probe() -> None:
            while time.monotonic() < deadline:
                began = time.perf_counter()
                async with session.get(url + "/health") as resp:
                    await resp.read()
                lags.append(time.perf_counter() - began)
                await asyncio.sleep(0.05)

        await asyncio.gather(probe(), *(client() for _ in range(streams)))
    return lags, whole, broken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--hogs", type=int, default=2, help="busy-loop processes (default 2)")
    parser.add_argument("--streams", type=int, default=64, help="streams kept open (default 64)")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long (default 60)")
    parser.add_argument("--workers", type=int, default=2, help="relay processes (default 2)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/10", help="Redis database to use and flush")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hearth-lag-"))
    env = hearth_env(tmp, args.redis_url) | {"HEARTH_WEB_WORKERS": str(args.workers)}
    os.environ.update(env)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        engine_port, web_port = free_port(), free_port()
        procs.append(start(engine_argv("fake", engine_port), tmp / "engine.log", env))
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        key = seed(engine_port)
        web = start(web_argv(web_port, args.workers), tmp / "web.log", env)
        procs.append(web)
        url, headers = f"http://127.0.0.1:{web_port}", {"Authorization": f"Bearer {key}"}

        async def ready() -> None:
            async with aiohttp.ClientSession() as session:
                await wait_ready(session, url + "/health", web, 120)

        uvloop.run(ready())
        for i in range(args.hogs):
            procs.append(start([sys.executable, "-c", "while True: pass"], tmp / f"hog{i}.log", env))
        lags, whole, broken = uvloop.run(load(url, headers, args.streams, args.seconds))
        ms = {q: pct(lags, q) * 1000 for q in (0.5, 0.9, 0.99, 1.0)}
        print(
            f"{args.hogs} hogs, {args.streams} streams, {args.workers} relays, {os.cpu_count()} cores,"
            f" {args.seconds:g} s; /health lag ms: p50 {ms[0.5]:.1f} p90 {ms[0.9]:.1f} p99 {ms[0.99]:.1f}"
            f" max {ms[1.0]:.1f} ({len(lags)} probes); streams whole {whole}, not {broken}"
        )
        log = (tmp / "web.log").read_text(errors="replace")
        late = [line.split("WARNING ", 1)[1] for line in log.splitlines() if "answered its health check" in line]
        print("late health check answers (over 2 s):", late or "none")
        print("relays replaced:", log.count(" died"))
    finally:
        for proc in reversed(procs):
            stop(proc)
        redis.Redis.from_url(args.redis_url).flushdb()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
