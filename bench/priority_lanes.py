"""Priority lanes under saturation (issue 30): an interactive key's TTFT while another key floods the deployment.

The simulator (``python -m engines.simulator``) runs 32 sequences at once, a 20 ms decode step with no cost per
sequence, prefill at 5,000 tokens/s, no prefix cache (every prompt is computed), first come first served (its
``--scheduling-policy`` left at fcfs, so what is measured is the gateway's lanes alone). Hearth's web server
(uvicorn, one process) relays to it, on a throwaway SQLite database, once with HEARTH_LANES on and once off.

- **Interactive**: a key of class interactive sends one streamed chat a second (open loop), a fresh 2,000-word prompt
  each (a coding agent's context: ~0.4 s of prefill) and 8 tokens out; TTFT is the time to its first content chunk.
- **Idle**: that alone, the deployment otherwise idle: the reference.
- **Standard flood**: a key of class standard keeps 200 streams going (closed loop: each client sends its next
  100-token chat as its last ends; ~2 s each), 6.4 times what the engine runs at once; after a warm-up the
  interactive key's requests are sent beside it. Lanes on, then off.
- **Batch beside**: the same flood from a key of class batch, lanes on: the interactive p99 against idle's.

Prints a Markdown table: TTFT p50 and p99 (nearest rank, ms) and their ratios to idle, with the engine's mean
requests running and waiting over the phase (sampled from its /metrics once a second) and the flood's streams
that ended whole meanwhile. Needs Redis on 127.0.0.1:6379 (db 11,
flushed at the end); everything else it starts itself, on 127.0.0.1, and stops even on error. About 3 minutes.
"""

import argparse
import asyncio
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import redis
from loadgen import CONTENT_RE, pct
from procs import ROOT, free_port, hearth_env, seed, start, stop, web_argv

ENGINE_FLAGS = [
    "--max-num-seqs",
    "32",
    "--kv-cache-tokens",
    "4000000",
    "--max-model-len",
    "8192",
    "--decode-ms-per-token",
    "20",
    "--decode-ms-per-seq",
    "0",
    "--prefill-tokens-per-s",
    "5000",
    "--natural-output-tokens",
    "100000",
    "--no-enable-prefix-caching",
    "--disable-uvicorn-access-log",
]
FLOOD, FLOOD_TOKENS = 200, 100  # concurrent streams of the flooding key, tokens each
PROMPT_WORDS, ANSWER_TOKENS = 2000, 8  # an interactive request
WORDS = [f"w{i}" for i in range(5000)]


@dataclass
class Phase:
    name: str
    ttfts: list[float] = field(default_factory=list)  # seconds
    errors: int = 0
    waiting: list[float] = field(default_factory=list)  # the engine's requests waiting, sampled
    running: list[float] = field(default_factory=list)  # the engine's requests running, sampled
    flooded: int = 0  # flood streams that ended whole meanwhile

    def ms(self, q: float) -> float:
        return pct(self.ttfts, q) * 1000


def chat(words: int, tokens: int) -> dict[str, object]:
    text = " ".join(random.choices(WORDS, k=words))
    return {"model": "bench", "messages": [{"role": "user", "content": text}], "stream": True, "max_tokens": tokens}


async def one(session: aiohttp.ClientSession, url: str, key: str, body: dict[str, object]) -> float | None:
    """One streamed chat read to its end; its TTFT (s), None when it failed."""
    started, first = time.perf_counter(), None
    try:
        async with session.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as resp:
            if resp.status != 200:
                return None
            async for line in resp.content:
                if first is None and CONTENT_RE.search(line):
                    first = time.perf_counter() - started
    except aiohttp.ClientError:
        return None
    return first


async def ready(session: aiohttp.ClientSession, base: str, key: str) -> None:
    """Until the gateway lists the bench model to ``key`` (60 s at most)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            async with session.get(base + "/v1/models", headers={"Authorization": f"Bearer {key}"}) as resp:
                if resp.status == 200 and "bench" in await resp.text():
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.3)
    raise RuntimeError(f"{base} not ready after 60 s")


async def flood(session: aiohttp.ClientSession, url: str, key: str, result: Phase) -> None:
    """FLOOD clients in a closed loop until cancelled, counting the streams that ended whole in ``result``."""

    async def client() -> None:
        while True:
            ttft = await one(session, url, key, chat(8, FLOOD_TOKENS))
            result.flooded += ttft is not None  # after the await: a += around it would lose the others' counts

    await asyncio.gather(*(client() for _ in range(FLOOD)))


async def sample_engine(session: aiohttp.ClientSession, engine: str, result: Phase) -> None:
    """The engine's requests waiting and running, once a second, until cancelled."""
    while True:
        async with session.get(engine + "/metrics") as resp:
            lines = (await resp.text()).splitlines()
        for name, into in (("waiting", result.waiting), ("running", result.running)):
            into += [float(ln.rsplit(" ", 1)[1]) for ln in lines if ln.startswith(f"vllm:num_requests_{name}{{")]
        await asyncio.sleep(1.0)


async def phase(
    name: str, base: str, engine: str, keys: dict[str, str], flooding: str | None, samples: int, warmup: float
) -> Phase:
    """``samples`` interactive requests, one a second, beside ``flooding``'s flood (a class, or None: idle)."""
    url = base + "/v1/chat/completions"
    result = Phase(name)
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=4)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=300)) as session:
        await ready(session, base, keys["interactive"])
        side = [asyncio.ensure_future(flood(session, url, keys[flooding], result))] if flooding else []
        side.append(asyncio.ensure_future(sample_engine(session, engine, result)))
        await asyncio.sleep(warmup if flooding else 0)
        result.waiting.clear()
        result.running.clear()
        result.flooded = 0
        sent = []
        for _ in range(samples):
            sent.append(
                asyncio.ensure_future(one(session, url, keys["interactive"], chat(PROMPT_WORDS, ANSWER_TOKENS)))
            )
            await asyncio.sleep(1.0)
        for ttft in await asyncio.gather(*sent):
            if ttft is None:
                result.errors += 1
            else:
                result.ttfts.append(ttft)
        for task in side:
            task.cancel()
        await asyncio.gather(*side, return_exceptions=True)
    await asyncio.sleep(2)  # the engine aborts what the flood left
    return result


def table(phases: list[Phase]) -> str:
    idle = phases[0]
    rows = [
        "| run | interactive TTFT p50 | p99 | p50 vs idle | p99 vs idle | engine running / waiting (mean) "
        "| flood streams done | samples |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in phases:
        waiting = sum(p.waiting) / len(p.waiting) if p.waiting else 0.0
        running = sum(p.running) / len(p.running) if p.running else 0.0
        failed = f" ({p.errors} failed)" if p.errors else ""
        rows.append(
            f"| {p.name} | {p.ms(0.5):.0f} ms | {p.ms(0.99):.0f} ms | {p.ms(0.5) / idle.ms(0.5):.2f}× "
            f"| {p.ms(0.99) / idle.ms(0.99):.2f}× | {running:.0f} / {waiting:.0f} | {p.flooded} "
            f"| {len(p.ttfts)}{failed} |"
        )
    return "\n".join(rows)


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--samples", type=int, default=15, help="interactive requests per phase (one a second)")
    args.add_argument("--warmup", type=float, default=12.0, help="seconds of flood before the samples")
    args.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    opts = args.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hearth-lanes-bench-"))
    env = hearth_env(tmp, opts.redis_url)
    os.environ.update(env)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        engine_port = free_port()
        argv = [sys.executable, "-m", "engines.simulator", "--model", "bench", "--port", str(engine_port)]
        procs.append(start([*argv, "--host", "127.0.0.1", *ENGINE_FLAGS], tmp / "engine.log", env))
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        keys = {"standard": seed(engine_port)}
        from django.contrib.auth.models import User

        from console.access.keys import create_key

        admin = User.objects.create_superuser("bench-admin", "", secrets.token_urlsafe(16))  # grants interactive
        for name in ("interactive", "batch"):
            keys[name] = create_key(name, admin, priority=name)[1]
        engine = f"http://127.0.0.1:{engine_port}"
        phases = []
        for lanes in ("on", "off"):
            port = free_port()
            web = start(web_argv(port), tmp / f"web-{lanes}.log", {**env, "HEARTH_LANES": lanes})
            procs.append(web)
            base = f"http://127.0.0.1:{port}"
            run = [("idle deployment", None)] if lanes == "on" else []
            run.append((f"200 standard streams, lanes {lanes}", "standard"))
            run += [("200 batch streams beside, lanes on", "batch")] if lanes == "on" else []
            for name, flooding in run:
                print(f"  {name} ...", file=sys.stderr, flush=True)
                phases.append(asyncio.run(phase(name, base, engine, keys, flooding, opts.samples, opts.warmup)))
            stop(web)
        phases = [phases[0], phases[1], phases[3], phases[2]]  # idle, flood on, flood off, batch
        print(table(phases))
        flood_on, batch = phases[1], phases[3]
        print(
            f"\ntargets: interactive under the standard flood, lanes on, within 1.5× of idle: p50 "
            f"{flood_on.ms(0.5) / phases[0].ms(0.5):.2f}×, p99 {flood_on.ms(0.99) / phases[0].ms(0.99):.2f}×; "
            f"interactive p99 beside the batch flood within 1.10× of without it: "
            f"{batch.ms(0.99) / phases[0].ms(0.99):.2f}×"
        )
    finally:
        for proc in reversed(procs):
            stop(proc)
        redis.Redis.from_url(opts.redis_url).flushdb()
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")


if __name__ == "__main__":
    main()
