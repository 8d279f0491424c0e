"""The capacity model seen from outside: a KV budget that queues requests, and the prefix cache."""

import asyncio
import math
import statistics
import time
from typing import Any

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from engines.simulator import tokenizer
from tests.simulator.simproc import MODEL, Sim, SimFactory

STREAMS = 64
FITTING = 16
MAX_TOKENS = 6
BLOCK = 16


def gauges(text: str) -> dict[str, float]:
    """Sample name → value, summed over label sets."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def messages(i: int) -> list[Any]:
    padding = " and then some more words" * 5  # a prompt of 41 tokens: 3 blocks, as prompt + answer is
    return [{"role": "user", "content": f"Request number {i:02d}, please answer at length{padding}."}]


async def one_stream(client: openai.AsyncOpenAI, i: int) -> tuple[float, str | None]:
    """(seconds to the first content token, finish reason) of one streamed request."""
    started = time.monotonic()
    first: float | None = None
    finish = None
    stream = await client.chat.completions.create(model=MODEL, messages=messages(i), max_tokens=MAX_TOKENS, stream=True)
    async for chunk in stream:
        choice = chunk.choices[0]
        if first is None and choice.delta.content:
            first = time.monotonic() - started
        finish = choice.finish_reason or finish
    assert first is not None
    return first, finish


async def load(sim: Sim) -> tuple[list[tuple[float, str | None]], list[dict[str, float]]]:
    client = openai.AsyncOpenAI(base_url=sim.base + "/v1", api_key="unused", max_retries=0, timeout=60)
    tasks = []
    for i in range(STREAMS):  # staggered a little so that arrival order is index order
        tasks.append(asyncio.create_task(one_stream(client, i)))
        await asyncio.sleep(0.004)
    scrapes = []
    async with httpx.AsyncClient(base_url=sim.base) as http:
        while not all(t.done() for t in tasks):
            scrapes.append(gauges((await http.get("/metrics")).text))
            await asyncio.sleep(0.05)
    results = await asyncio.gather(*tasks)
    await client.close()
    return results, scrapes


def test_a_kv_budget_for_16_requests_queues_the_rest_first_in_first_out(sim_factory: SimFactory) -> None:
    prompt = tokenizer.count(tokenizer.render_chat(messages(0)))  # the same for every i
    per_request = math.ceil((prompt + MAX_TOKENS) / BLOCK) * BLOCK
    assert per_request == math.ceil(prompt / BLOCK) * BLOCK  # the answers take no block more: no preemption
    sim = sim_factory(
        "--served-model-name",
        MODEL,
        "--max-model-len",
        "256",
        "--block-size",
        str(BLOCK),
        "--kv-cache-tokens",
        str(FITTING * per_request),
        "--max-num-seqs",
        "1024",
        "--natural-output-tokens",
        "200",
        "--no-enable-prefix-caching",
        "--decode-ms-per-token",
        "300",  # each request holds its blocks ~1.8 s: the 64 arrive within that even on a busy machine
    )
    results, scrapes = asyncio.run(load(sim))
    assert [finish for _, finish in results] == ["length"] * STREAMS
    running = [s["vllm:num_requests_running"] for s in scrapes]
    waiting = [s["vllm:num_requests_waiting"] for s in scrapes]
    assert max(running) <= FITTING and max(running) > 0
    assert any(w > 0 for w in waiting)
    assert max(s["vllm:kv_cache_usage_perc"] for s in scrapes) <= 1.0
    ttft = [first for first, _ in results]
    assert statistics.median(ttft[-FITTING:]) > statistics.median(ttft[:FITTING])
    final = gauges(sim.scrape())
    assert final["vllm:request_queue_time_seconds_sum"] > 0 and final["vllm:num_preemptions_total"] == 0
    assert final["vllm:num_requests_running"] == final["vllm:num_requests_waiting"] == 0


def test_a_repeated_long_prompt_hits_the_prefix_cache(sim: Sim) -> None:
    long: Any = [{"role": "user", "content": "A long shared preamble about the harbor. " * 40}]
    before = gauges(sim.scrape())
    client = sim.openai()
    first = client.chat.completions.create(model=MODEL, messages=long, max_tokens=2)
    second = client.chat.completions.create(model=MODEL, messages=long, max_tokens=2)
    after = gauges(sim.scrape())
    assert after["vllm:prefix_cache_hits_total"] > before["vllm:prefix_cache_hits_total"]
    assert after["vllm:prompt_tokens_cached_total"] > 0
    assert after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"] >= 2 * 300
    assert first.usage is not None and second.usage is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0  # type: ignore[union-attr]
    cached = second.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
    assert cached is not None and cached % BLOCK == 0 and 0 < cached < second.usage.prompt_tokens
