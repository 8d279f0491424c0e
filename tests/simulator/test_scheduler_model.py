"""The simulator's scheduler, driven directly (no HTTP): the KV budget queues, the prefix cache shares and
hits, TTFT grows with prompt length, preemption under pressure; each as vLLM V1 behaves."""

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

from prometheus_client.parser import text_string_to_metric_families

from engines.simulator.config import parse_config
from engines.simulator.jobs import Emission, Job
from engines.simulator.kv_blocks import BlockPool, block_hashes
from engines.simulator.metrics import SimMetrics
from engines.simulator.scheduler import Engine

BLOCK = 16
FAST = ["--decode-ms-per-token", "1", "--decode-ms-per-seq", "0", "--decode-ms-per-1k-kv-tokens", "0"]


def engine(*flags: str) -> Engine:
    cfg = parse_config(["--block-size", str(BLOCK), "--prefill-tokens-per-s", "1000000", *FAST, *flags])
    return Engine(cfg, SimMetrics("vllm", "m", {}))


def counter(eng: Engine, name: str) -> float:
    for family in text_string_to_metric_families(eng.metrics.render().decode()):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise KeyError(name)


def prompt(seed: int, tokens: int) -> list[int]:
    return [1000 * seed + i for i in range(tokens)]


async def drive(eng: Engine, jobs: Callable[[], Awaitable[list[Job]]], watch: Callable[[], None]) -> list[Job]:
    """Run the engine while ``jobs`` submits and its jobs finish, calling ``watch`` after every tick."""
    loop = asyncio.create_task(eng.run())
    submitted = await jobs()
    while not all(job.done for job in submitted):
        watch()
        await asyncio.sleep(0.0005)
    loop.cancel()
    return submitted


async def tokens_of(job: Job) -> list[Emission]:
    return [e async for e in job.emissions()]


def test_a_full_kv_cache_makes_new_requests_wait_first_in_first_out() -> None:
    # 20 sequences of 70 + 10 tokens (5 blocks from the start) in 40 blocks: 8 run at once, the rest wait.
    eng = engine("--kv-cache-tokens", str(40 * BLOCK), "--max-model-len", "256", "--no-enable-prefix-caching")
    seen: set[tuple[int, int]] = set()
    order: list[int] = []

    async def submit() -> list[Job]:
        return [eng.submit([prompt(i, 70)], [(10, "length")]) for i in range(20)]

    def watch() -> None:
        running, waiting, usage, _, _ = eng.state()
        seen.add((running, waiting))
        assert usage <= 1.0
        order.extend(s.prompt_ids[0] // 1000 for s in eng.running if s.prompt_ids[0] // 1000 not in order)

    asyncio.run(drive(eng, submit, watch))
    assert max(running for running, _ in seen) == 8 and (8, 12) in seen
    assert order == sorted(order)
    assert counter(eng, "vllm:num_preemptions_total") == 0
    assert eng.pool.used == 0 and not eng.running and not eng.waiting


def test_max_num_seqs_caps_what_runs_even_with_kv_to_spare() -> None:
    eng = engine("--kv-cache-tokens", "65536", "--max-num-seqs", "3")
    peak = 0

    async def submit() -> list[Job]:
        return [eng.submit([prompt(i, 10)], [(5, "length")]) for i in range(9)]

    def watch() -> None:
        nonlocal peak
        peak = max(peak, eng.state()[0])

    asyncio.run(drive(eng, submit, watch))
    assert peak == 3


def test_sequences_that_outgrow_the_cache_are_preempted_and_still_finish_every_token_once() -> None:
    # Prompts of 32 tokens (2 blocks) are admitted 10 at a time into 20 blocks; each then grows to
    # 32 + 48 tokens (5 blocks), so the last admitted are preempted and recomputed later.
    eng = engine("--kv-cache-tokens", str(20 * BLOCK), "--max-model-len", "128", "--no-enable-prefix-caching")
    streams: list[list[Emission]] = []

    async def submit() -> list[Job]:
        jobs = [eng.submit([prompt(i, 32)], [(48, "length")]) for i in range(10)]
        streams.extend(await asyncio.gather(*(tokens_of(job) for job in jobs)))
        return jobs

    asyncio.run(drive(eng, submit, lambda: None))
    assert counter(eng, "vllm:num_preemptions_total") > 0
    for emissions in streams:
        assert [e.position for e in emissions] == list(range(48)) and emissions[-1].last
    assert counter(eng, "vllm:generation_tokens_total") == 10 * 48
    assert eng.pool.used == 0


def test_a_shared_prefix_is_held_once_and_served_from_the_cache() -> None:
    eng = engine("--kv-cache-tokens", str(64 * BLOCK), "--max-model-len", "512")
    shared = prompt(9, 8 * BLOCK)
    held: list[int] = []

    async def submit() -> list[Job]:
        first = eng.submit([[*shared, 1, 2, 3]], [(40, "length")])
        await asyncio.sleep(0.01)  # the first one's prefix is computed and cached
        second = eng.submit([[*shared, 4, 5, 6]], [(40, "length")])
        return [first, second]

    def watch() -> None:
        if len(eng.running) == 2:
            held.append(eng.pool.used)

    first, second = asyncio.run(drive(eng, submit, watch))
    assert first.cached_tokens == 0
    assert second.cached_tokens == 8 * BLOCK
    assert held and max(held) < 2 * math.ceil((8 * BLOCK + 3 + 40) / BLOCK)  # the 8 shared blocks held once
    assert counter(eng, "vllm:prefix_cache_hits_total") == 8 * BLOCK
    assert counter(eng, "vllm:prefix_cache_queries_total") == 2 * (8 * BLOCK + 3)


def test_a_cached_prefix_never_covers_the_whole_prompt() -> None:
    eng = engine("--kv-cache-tokens", str(64 * BLOCK), "--max-model-len", "512")
    same = prompt(3, 4 * BLOCK)

    async def submit() -> list[Job]:
        first = eng.submit([same], [(2, "length")])
        await tokens_of(first)
        return [first, eng.submit([same], [(2, "length")])]

    _, again = asyncio.run(drive(eng, submit, lambda: None))
    assert again.cached_tokens == 3 * BLOCK  # one block is computed again, for its last token


def ttft(eng: Engine, tokens: int) -> float:
    async def submit() -> list[Job]:
        started = time.monotonic()
        job = eng.submit([prompt(tokens, tokens)], [(1, "length")])
        await tokens_of(job)
        times.append(time.monotonic() - started)
        return [job]

    times: list[float] = []
    asyncio.run(drive(eng, submit, lambda: None))
    return times[0]


def test_ttft_grows_with_prompt_length_and_long_prompts_are_prefilled_in_chunks() -> None:
    flags = ["--kv-cache-tokens", "65536", "--max-model-len", "8192", "--max-num-batched-tokens", "512"]
    eng = engine(*flags, "--prefill-tokens-per-s", "40000")
    assert ttft(eng, 4000) > ttft(eng, 500) > ttft(eng, 50)
    seq_job = eng.submit([prompt(1, 2000)], [(1, "length")])
    scheduled, _ = eng._schedule_running(512)
    eng._admit(time.monotonic(), 512, scheduled)
    assert scheduled == {seq_job.sequences[0]: 512}  # a quarter of the prompt in this step
    assert eng.step_seconds(scheduled) == 512 / 40000 + 1 / 1000


def test_a_step_takes_longer_with_more_kv_to_read() -> None:
    eng = engine("--kv-cache-tokens", "65536", "--decode-ms-per-1k-kv-tokens", "2")
    job = eng.submit([prompt(1, 4000)], [(3, "length")])
    seq = job.sequences[0]
    scheduled, _ = eng._schedule_running(8192)
    eng._admit(time.monotonic(), 8192, scheduled)
    seq.computed, seq.generated = 4000, 1
    decode = {seq: 1}
    assert eng.step_seconds(decode) == (1 + 2 * 4.0) / 1000


def test_the_block_pool_evicts_the_least_recently_freed_cached_block_only_when_it_must() -> None:
    pool = BlockPool(total=3, caching=True)
    a, b = block_hashes(list(range(2 * BLOCK)), BLOCK)
    pool.take(a)
    pool.take(b)
    pool.release([a, b])
    assert (pool.used, pool.free, pool.cached(a), pool.cached(b)) == (0, 3, True, True)
    pool.take(None)  # an uncached block is still free: nothing evicted
    assert pool.cached(a) and pool.cached(b)
    pool.take(None)  # now one must go: b was freed first (a prompt's tail goes before its head)
    assert pool.cached(a) and not pool.cached(b)
    assert pool.cost(a) == 1 and pool.free == 1
    pool.take(a)
    assert pool.cost(a) == 0 and pool.free == 0
