"""What the gateway's streaming relay costs: the same load direct to a fake engine and through Hearth, one run.

Usage: ``.venv/bin/python bench/gateway_overhead.py [--streams 1,64,256] [--repeat 2] [--min-samples 16]``

Starts ``fake_upstream.py`` and the appliance's real web server (``uvicorn appliance.asgi:application``
with uvloop and httptools) on 127.0.0.1, seeds a throwaway SQLite database with a ready deployment
routed to the fake engine and an API key, then for each concurrency level and repetition runs N
concurrent streaming chats direct, then through the gateway. The load generator runs here, on its own
uvloop loop, in neither server's process. Prints a table and a verdict against ../shared/FACTS.md;
asserts nothing. Needs Redis at 127.0.0.1:6379 (uses db 10 and flushes it at the end).
"""

import argparse
import asyncio
import math
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import redis
import uvloop

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = "redis://127.0.0.1:6379/10"
BODY = b'{"model":"bench","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":64}'
EXPECTED_CHUNKS = 64  # fake_upstream.CHUNKS
# FACTS.md, "Streaming relay overhead": the minimal aiohttp relay's figures, as (low, high) bounds we accept.
FACTS_ADDED_TTFT_1 = 2.0  # ms; FACTS measured 0.9 ms added TTFT p50 at 1 stream
FACTS_RATIO = {64: (0.98, 1.00), 256: (0.90, 0.92)}


@dataclass
class Sample:
    ttft: float | None = None  # seconds to the first content chunk
    total: float = 0.0  # seconds to the end of the stream
    chunks: int = 0  # content chunks received
    error: str | None = None


@dataclass
class Run:
    """One mode (direct or gateway) at one level and repetition."""

    samples: list[Sample] = field(default_factory=list)
    wall: float = 0.0  # seconds, summed over rounds
    cpu: float = 0.0  # CPU seconds the web server used over the rounds (gateway mode only)

    def ttfts_ms(self) -> list[float]:
        return [s.ttft * 1000 for s in self.samples if s.ttft is not None and s.error is None]

    @property
    def chunks_per_s(self) -> float:
        return sum(s.chunks for s in self.samples) / self.wall if self.wall else 0.0

    @property
    def errors(self) -> Counter[str]:
        return Counter(s.error for s in self.samples if s.error)


@dataclass
class Row:
    streams: int
    rep: int
    direct: Run
    gateway: Run
    web_cpu_us_per_chunk: float
    web_rss_mb: float

    @property
    def ratio(self) -> float:
        return self.gateway.chunks_per_s / self.direct.chunks_per_s if self.direct.chunks_per_s else 0.0

    def added(self, q: float) -> float:
        return pct(self.gateway.ttfts_ms(), q) - pct(self.direct.ttfts_ms(), q)


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in 0–1; NaN for no values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else math.nan


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def web_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds used so far, resident MB) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    rss_kb = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if line.startswith("VmRSS:"))  # fmt: skip
    return cpu, rss_kb / 1024


def seed(upstream_port: int) -> str:
    """Rows for one ready deployment "bench" routed to the fake engine; returns a new API key."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
    sys.path.insert(0, str(ROOT))
    django.setup()
    from console.models import Deployment, DeploymentState, ModelSource, Replica
    from console.services import bump_routing_version, create_key

    source = ModelSource.objects.create(name="bench", kind="local", path="/nonexistent", config={}, weights_bytes=0)
    deployment = Deployment.objects.create(
        name="bench", model=source, engine="vllm", served_model_name="bench", max_model_len=4096,
        kv_space_gib=1.0, plan={}, state=DeploymentState.READY,
    )  # fmt: skip
    Replica.objects.create(
        deployment=deployment, runtime="process", runtime_name="fake-upstream", host="127.0.0.1",
        port=upstream_port, engine_api_key=secrets.token_hex(16), running=True, ready_at=deployment.created_at,
    )  # fmt: skip
    _, key = create_key("bench", None)
    bump_routing_version()
    return key


def start(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def wait_ready(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], proc: subprocess.Popen[bytes]
) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            async with session.get(url, headers=headers) as resp:
                if resp.status == 200 and (url.endswith("/health") or b"bench" in await resp.read()):
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} not ready after 30 s")


async def one(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Sample:
    sample = Sample()
    started = time.perf_counter()
    done = False
    try:
        async with session.post(url, data=BODY, headers=headers) as resp:
            if resp.status != 200:
                return Sample(error=f"HTTP {resp.status}")
            async for line in resp.content:  # one SSE line at a time
                if line.startswith(b"data: [DONE]"):
                    done = True
                elif b'"content":"' in line and b'"content":""' not in line:
                    sample.chunks += 1
                    if sample.ttft is None:
                        sample.ttft = time.perf_counter() - started
                elif b'"error"' in line:
                    sample.error = "in-stream error event"
    except (aiohttp.ClientError, TimeoutError) as exc:
        sample.error = type(exc).__name__
    sample.total = time.perf_counter() - started
    if sample.error is None and (not done or sample.chunks != EXPECTED_CHUNKS):
        sample.error = f"incomplete ({sample.chunks} chunks, done={done})"
    return sample


async def measure(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], n: int, rounds: int, pid: int | None = None
) -> Run:
    """``rounds`` rounds of ``n`` concurrent streams, after one unmeasured round to open connections;
    with ``pid``, also that process's CPU seconds over the measured rounds."""
    await asyncio.gather(*(one(session, url, headers) for _ in range(n)))
    run = Run()
    cpu_before = web_stats(pid)[0] if pid else 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        run.samples += await asyncio.gather(*(one(session, url, headers) for _ in range(n)))
        run.wall += time.perf_counter() - started
    run.cpu = web_stats(pid)[0] - cpu_before if pid else 0.0
    return run


async def bench(args: argparse.Namespace, upstream: str, gateway: str, key: str, web: subprocess.Popen[bytes],
                up: subprocess.Popen[bytes]) -> list[Row]:  # fmt: skip
    direct_h = {"Authorization": "Bearer anything", "Content-Type": "application/json"}
    gateway_h = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    # keepalive under uvicorn's 5 s, so the client never reuses a connection the server is closing
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=4)
    rows = []
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        await wait_ready(session, upstream + "/health", {}, up)
        await wait_ready(session, gateway + "/v1/models", gateway_h, web)
        for n in args.streams:
            rounds = max(2, math.ceil(args.min_samples / n))
            for rep in range(1, args.repeat + 1):
                direct = await measure(session, upstream + "/v1/chat/completions", direct_h, n, rounds)
                through = await measure(session, gateway + "/v1/chat/completions", gateway_h, n, rounds, web.pid)
                relayed = sum(s.chunks for s in through.samples) or 1
                rows.append(Row(n, rep, direct, through, through.cpu * 1e6 / relayed, web_stats(web.pid)[1]))
                print(f"  {n} streams, repetition {rep}: done", file=sys.stderr, flush=True)
    return rows


def table(rows: list[Row]) -> str:
    head = (f"{'streams':>7} {'rep':>3} {'n':>5} | {'direct TTFT ms':>14} | {'gateway TTFT ms':>15} | "
            f"{'added TTFT ms':>13} | {'chunks/s direct/gw':>18} {'ratio':>5} | {'errors d/g':>10} | "
            f"{'web CPU':>9} {'web RSS':>7}")  # fmt: skip
    sub = (f"{'':>7} {'':>3} {'':>5} | {'p50 / p99':>14} | {'p50 / p99':>15} | {'p50 / p99':>13} | "
           f"{'':>18} {'':>5} | {'':>10} | {'µs/chunk':>9} {'MB':>7}")  # fmt: skip
    lines = [head, sub, "-" * len(head)]
    for r in rows:
        d, g = r.direct.ttfts_ms(), r.gateway.ttfts_ms()
        lines.append(
            f"{r.streams:>7} {r.rep:>3} {len(r.gateway.samples):>5} | {pct(d, .5):6.1f} / {pct(d, .99):5.1f} | "
            f"{pct(g, .5):7.1f} / {pct(g, .99):5.1f} | {r.added(.5):5.1f} / {r.added(.99):5.1f} | "
            f"{r.direct.chunks_per_s:8.0f} / {r.gateway.chunks_per_s:7.0f} {r.ratio:5.2f} | "
            f"{sum(r.direct.errors.values()):>4} / {sum(r.gateway.errors.values()):<3} | "
            f"{r.web_cpu_us_per_chunk:9.0f} {r.web_rss_mb:7.1f}"
        )  # fmt: skip
    for r in rows:
        for mode, run in (("direct", r.direct), ("gateway", r.gateway)):
            for error, count in run.errors.items():
                lines.append(f"  {r.streams} streams rep {r.rep} {mode}: {count} × {error}")
    return "\n".join(lines)


def verdict(rows: list[Row]) -> str:
    """One line: this run's figures beside FACTS.md's for the aiohttp relay, and whether they agree."""
    parts, ok = [], True
    ones = [r.added(0.5) for r in rows if r.streams == 1]
    if ones:
        ok &= max(ones) <= FACTS_ADDED_TTFT_1
        parts.append(f"1 stream added TTFT p50 {min(ones):.1f}–{max(ones):.1f} ms (FACTS 0.9)")
    for n, (low, high) in FACTS_RATIO.items():
        ratios = [r.ratio for r in rows if r.streams == n]
        if ratios:
            ok &= min(ratios) >= low - 0.02 and max(ratios) <= high + 0.05
            parts.append(f"{n} streams ratio {min(ratios):.2f}–{max(ratios):.2f} (FACTS {low:.2f}–{high:.2f})")
    errors = sum(sum(r.gateway.errors.values()) for r in rows)
    ok &= errors == 0
    word = "in line with FACTS.md" if ok else "DIFFERS from FACTS.md"
    return f"verdict: {word}: " + "; ".join(parts) + f"; gateway errors {errors}"


def log_notes(log: Path) -> str:
    """The web server's exceptions and relay warnings, counted, so errors and truncations show in the report."""
    notable = re.compile(r"^[\w.]+(Error|Exception)\b|truncated stream|stream from .* broke|WARNING")
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if notable.search(ln)]
    if not lines:
        return "web server log: no exceptions or relay warnings"
    counts = Counter(lines).most_common(5)
    return "web server log:\n" + "\n".join(f"  {n} × {line}" for line, n in counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", default="1,64,256", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--repeat", default=2, type=int, help="repetitions per level (default 2)")
    parser.add_argument("--min-samples", default=16, type=int, help="requests per mode and repetition, at least")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hearth-bench-"))
    env = {**os.environ, "DEBUG": "false", "SECRET_KEY": secrets.token_urlsafe(50), "REDIS_URL": REDIS_URL,
           "DATABASE_URL": f"sqlite:///{tmp / 'bench.sqlite3'}", "HEARTH_DATA_DIR": str(tmp),
           "DJANGO_SETTINGS_MODULE": "appliance.settings", "PYTHONUNBUFFERED": "1"}  # fmt: skip
    os.environ.update(env)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        up_port, web_port = free_port(), free_port()
        procs.append(start([sys.executable, str(ROOT / "bench/fake_upstream.py"), str(up_port)], tmp / "up.log", env))
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        key = seed(up_port)
        uvicorn = [sys.executable, "-m", "uvicorn", "appliance.asgi:application", "--host", "127.0.0.1",
                   "--port", str(web_port), "--loop", "uvloop", "--http", "httptools", "--no-access-log"]  # fmt: skip
        procs.append(start(uvicorn, tmp / "web.log", env))
        upstream, web = procs
        rows = uvloop.run(
            bench(args, f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{web_port}", key, web, upstream)
        )
        print(table(rows))
        print(verdict(rows))
    finally:
        for proc in reversed(procs):
            stop(proc)
        if (tmp / "web.log").exists():
            print(log_notes(tmp / "web.log"))
        redis.Redis.from_url(REDIS_URL).flushdb()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
