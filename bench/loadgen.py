"""The load generator of ``gateway_overhead.py``: concurrent streaming chats, timed, and streams held open.

Runs on the benchmark's own uvloop loop. A content chunk is an SSE ``data:`` line whose delta has
non-empty ``content``, whichever way the server spaces its JSON.

Two patterns of N concurrent streams:

- ``steady`` (the default): N clients in a closed loop, each sending its next request as soon as its
  last answer ends, as LLMPerf (``--num-concurrent-requests``) and genai-perf (``--concurrency``) do.
  Answer lengths (``max_tokens``) are drawn from a normal distribution with mean CHUNKS and standard
  deviation CHUNKS / 4, seeded per level and repetition so every path gets the same requests (LLMPerf's
  ``--mean-output-tokens``/``--stddev-output-tokens``). Each client's first request only ramps up: its
  TTFT is not sampled (all N start at once), its chunks count towards throughput.
- ``burst``: rounds of N requests sent at the same instant, each round after the last one ended: a
  thundering herd, where a request's TTFT includes the gateway's work on the requests ahead of it.
"""

import asyncio
import json
import math
import random
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from procs import CHUNKS, proc_stats

CONTENT_RE = re.compile(rb'"content":\s*"[^"]')


def body(max_tokens: int, text: str = "hi") -> bytes:
    message = {"role": "user", "content": text}
    return json.dumps({"model": "bench", "messages": [message], "stream": True, "max_tokens": max_tokens}).encode()


MEASURED = body(CHUNKS)
WARMUP = body(1)  # opens the connections and warms the path without a whole answer's cost


@dataclass
class Sample:
    ttft: float | None = None  # seconds to the first content chunk
    total: float = 0.0  # seconds to the end of the stream
    chunks: int = 0  # content chunks received
    error: str | None = None


@dataclass
class Run:
    """One path (direct, hearth or litellm) at one level and repetition."""

    samples: list[Sample] = field(default_factory=list)
    ramp: list[Sample] = field(default_factory=list)  # steady pattern: each client's first request
    wall: float = 0.0  # seconds the measured requests took, ramp-up included
    cpu: float = 0.0  # CPU seconds the gateway process used meanwhile (not for direct)
    kernel_cpu: float = 0.0  # the part of ``cpu`` spent in the kernel (system calls: reads, writes, epoll)
    rss_mb: float = 0.0  # gateway RSS after them (not for direct)

    def ttfts_ms(self) -> list[float]:
        return [s.ttft * 1000 for s in self.samples if s.ttft is not None and s.error is None]

    @property
    def chunks(self) -> int:
        return sum(s.chunks for s in self.samples + self.ramp)

    @property
    def errors(self) -> Counter[str]:
        return Counter(s.error for s in self.samples + self.ramp if s.error)


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in 0–1; NaN for no values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else math.nan


async def wait_ready(
    session: aiohttp.ClientSession,
    url: str,
    proc: subprocess.Popen[bytes],
    seconds: float,
    check: Callable[[bytes], bool] = lambda _: True,
) -> None:
    """Poll ``url`` until it answers 200 and ``check`` likes the body; raise if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            async with session.get(url) as resp:
                if resp.status == 200 and check(await resp.read()):
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.3)
    raise RuntimeError(f"{url} not ready after {seconds:.0f} s")


async def one(session: aiohttp.ClientSession, url: str, data: bytes = MEASURED, expect: int = CHUNKS) -> Sample:
    sample = Sample()
    started = time.perf_counter()
    done = False
    try:
        async with session.post(url, data=data) as resp:
            if resp.status != 200:
                return Sample(error=f"HTTP {resp.status}")
            async for line in resp.content:  # one SSE line at a time
                if line.startswith(b"data: [DONE]"):
                    done = True
                elif CONTENT_RE.search(line):
                    sample.chunks += 1
                    if sample.ttft is None:
                        sample.ttft = time.perf_counter() - started
                elif line.startswith(b"data:") and b'"error"' in line:
                    sample.error = "in-stream error event"
    except (aiohttp.ClientError, TimeoutError) as exc:
        sample.error = type(exc).__name__
    sample.total = time.perf_counter() - started
    if sample.error is None and (not done or sample.chunks != expect):
        sample.error = f"incomplete ({sample.chunks} chunks, done={done})"
    return sample


def lengths(n: int, per_client: int, seed: int) -> list[list[int]]:
    """``max_tokens`` of each client's requests: normal, mean CHUNKS, sd CHUNKS / 4, within 1–2 × CHUNKS."""
    rng = random.Random(seed)
    return [
        [min(2 * CHUNKS, max(1, round(rng.gauss(CHUNKS, CHUNKS / 4)))) for _ in range(per_client)] for _ in range(n)
    ]


async def measure(
    session: aiohttp.ClientSession, url: str, n: int, rounds: int, pid: int | None, pattern: str, seed: int
) -> Run:
    """N concurrent streams in ``pattern`` (steady: each of ``n`` clients sends ``rounds`` sampled requests
    after its ramp-up one; burst: ``rounds`` rounds of ``n``), after one unmeasured round of one-token
    answers that opens the connections; with ``pid``, that process's CPU seconds over the measured
    requests and its RSS."""
    await asyncio.gather(*(one(session, url, WARMUP, 1) for _ in range(n)))
    run = Run()
    cpu_before, _, kernel_before = proc_stats(pid) if pid else (0.0, 0.0, 0.0)
    started = time.perf_counter()
    if pattern == "steady":

        async def client(plan: list[int]) -> list[Sample]:
            return [await one(session, url, body(k), k) for k in plan]

        for first, *rest in await asyncio.gather(*(client(p) for p in lengths(n, rounds + 1, seed))):
            run.ramp.append(first)
            run.samples += rest
    else:
        for _ in range(rounds):
            run.samples += await asyncio.gather(*(one(session, url) for _ in range(n)))
    run.wall = time.perf_counter() - started
    if pid:
        cpu_after, run.rss_mb, kernel_after = proc_stats(pid)
        run.cpu, run.kernel_cpu = cpu_after - cpu_before, kernel_after - kernel_before
    return run


@dataclass
class Held:
    """RSS of a gateway with ``opened`` of ``asked`` streams open, against its idle RSS; MB."""

    asked: int
    opened: int
    idle_mb: float
    open_mb: float
    after_mb: float  # a few seconds after the clients went away
    open_s: float  # seconds it took to get the first chunk of every stream
    ended: int | None = None  # with ``to_end``: streams that ended whole ([DONE] after all their chunks)
    errors: Counter[str] = field(default_factory=Counter)  # with ``to_end``: how the others ended
    held_s: float = 0.0  # with ``to_end``: seconds until the last stream ended

    @property
    def per_1000_mb(self) -> float:
        return (self.open_mb - self.idle_mb) * 1000 / self.opened if self.opened else math.nan


async def hold(url: str, headers: dict[str, str], n: int, pid: int, deadline_s: float, to_end: bool = False) -> Held:
    """Open ``n`` streams of 3 chunks 30 s apart, read the gateway's RSS with them open, then drop them all
    (waiting at most ``deadline_s`` for the first chunks); with ``to_end``, read every stream to its end
    instead (~60 s) and count those that did not end whole."""
    data = body(3, "hold this open [[sim:stall-between=30]]")
    connector = aiohttp.TCPConnector(limit=0)
    opened = 0
    everyone = asyncio.Event()

    async def stream(session: aiohttp.ClientSession) -> str | None:
        nonlocal opened
        chunks, done = 0, False
        async with session.post(url, data=data) as resp:
            if resp.status != 200:
                return f"HTTP {resp.status}"
            async for line in resp.content:
                if CONTENT_RE.search(line):
                    chunks += 1
                    opened += chunks == 1
                    if opened == n and chunks == 1:
                        everyone.set()
                    if not to_end:
                        await asyncio.sleep(3600)  # hold it; cancelled below
                elif line.startswith(b"data:") and b'"error"' in line:
                    return "in-stream error event"
                done = done or line.startswith(b"data: [DONE]")
        return None if done and chunks == 3 else f"incomplete ({chunks} chunks, done={done})"

    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        await asyncio.sleep(1.0)
        idle_mb = proc_stats(pid)[1]
        started = time.perf_counter()
        tasks = [asyncio.create_task(stream(session)) for _ in range(n)]
        try:
            await asyncio.wait_for(everyone.wait(), deadline_s)
        except TimeoutError:
            pass
        open_s = time.perf_counter() - started
        await asyncio.sleep(1.0)
        open_mb = proc_stats(pid)[1]
        if not to_end:
            for task in tasks:
                task.cancel()
        ends = await asyncio.gather(*tasks, return_exceptions=True)
        held_s = time.perf_counter() - started
    await asyncio.sleep(3.0)
    held = Held(n, opened, idle_mb, open_mb, proc_stats(pid)[1], open_s)
    if to_end:
        held.errors = Counter(e if isinstance(e, str) else type(e).__name__ for e in ends if e is not None)
        held.ended, held.held_s = n - sum(held.errors.values()), held_s
    return held
