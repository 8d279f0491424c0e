"""Hearth's own load generator: streaming chat requests to the gateway, timed per token (aiohttp).

Requests are what ``vllm bench serve --backend openai-chat`` sends: one user message, ``stream`` with
``stream_options.include_usage``, ``max_tokens`` and ``ignore_eos`` (every answer is exactly that
long on vLLM, SGLang and the simulator), ``temperature`` 0. A token is a chunk whose ``choices[0].delta`` has
``content``, or a reasoning model's ``reasoning`` (vLLM ≥ 0.10) or ``reasoning_content`` (SGLang, older vLLM),
not empty, as ``vllm bench serve`` counts them: a thinking model's first token is reasoning. Token counts come from
the usage chunk (the engine's own).

Two patterns per level: ``concurrency`` runs N users in a closed loop, each sending its next request
when its answer ends (LLMPerf, genai-perf, ``vllm bench serve --max-concurrency``); ``rate`` sends
requests at Poisson arrivals of the given requests/s, at most MAX_IN_FLIGHT at once
(``vllm bench serve --request-rate``). Every level is bounded by its request count and a deadline; a
request still running at the deadline is cut and counted as a failure. A stop event ends a level at
once; requests cut by it are not counted. aiohttp, not httpx: FACTS.md measured httpx's pool
bookkeeping as the bottleneck of a streaming client at 64 streams.
"""

import asyncio
import itertools
import json
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from engines.capacity.profiles import Shape, calibration_texts, prompt_text
from engines.capacity.results import CUT, Sample

MAX_IN_FLIGHT = 512  # requests at once in a rate sweep; arrivals beyond wait
IDLE_TIMEOUT_S = 300.0  # silence on one stream that counts it as failed (a long prefill can be silent)


@dataclass(frozen=True)
class Target:
    """Where the requests go: the gateway's base URL (no ``/v1``), the check's key, the served model name."""

    base_url: str
    key: str
    model: str

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/v1/chat/completions"


def _body(model: str, text: str, max_tokens: int) -> bytes:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    return json.dumps(body).encode()


def _refusal(status: int) -> str:
    return f"refused (HTTP {status})" if 400 <= status < 500 else f"error (HTTP {status})"


async def send(session: aiohttp.ClientSession, target: Target, text: str, max_tokens: int, t0: float) -> Sample:
    """One streamed request; ``t0`` is the level's start (perf_counter seconds). Never raises for a failed
    request: its Sample carries the failure's kind."""
    started = time.perf_counter()
    stamps: list[float] = []
    usage: dict[str, object] = {}
    error, done = "", False
    try:
        async with session.post(target.url, data=_body(target.model, text, max_tokens)) as resp:
            if resp.status != 200:
                await resp.read()
                return Sample(started - t0, time.perf_counter() - started, error=_refusal(resp.status))
            async for line in resp.content:
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                event = json.loads(payload)
                if "error" in event:
                    error = "in-stream error"
                    break
                choices = event.get("choices") or []
                delta = (choices[0].get("delta") or {}) if choices else {}
                if delta.get("content") or delta.get("reasoning") or delta.get("reasoning_content"):
                    stamps.append(time.perf_counter())
                usage = event.get("usage") or usage
    except TimeoutError:
        error = "timeout"
    except (aiohttp.ClientError, ValueError) as exc:
        error = f"connection error ({type(exc).__name__})"
    return _sample(started - t0, started, stamps, usage, error or ("" if done else "stream cut without its end"))


def _sample(offset: float, started: float, stamps: list[float], usage: dict[str, object], error: str) -> Sample:
    e2e = time.perf_counter() - started
    if not error and not stamps:
        error = "no tokens"
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None

    def count(value: object, default: int) -> int:
        return value if isinstance(value, int) else default

    return Sample(
        started=offset,
        e2e=e2e,
        ttft=stamps[0] - started if stamps else None,
        output_tokens=count(usage.get("completion_tokens"), len(stamps)),
        prompt_tokens=count(usage.get("prompt_tokens"), 0),
        cached_tokens=count(cached, 0),
        itls=tuple(b - a for a, b in itertools.pairwise(stamps)),
        error=error,
    )


async def calibrate(session: aiohttp.ClientSession, target: Target) -> tuple[float, float]:
    """(tokens per word, chat-template overhead tokens) on the deployment's tokenizer, from the prompt
    token counts of two one-token requests. Raises RuntimeError when the deployment does not answer them."""
    short, long, extra = calibration_texts()
    counts = []
    for text in (short, long):
        sample = await send(session, target, text, 1, time.perf_counter())
        if sample.error or not sample.prompt_tokens:
            raise RuntimeError(f"the deployment did not answer a calibration request: {sample.error or 'no usage'}")
        counts.append(sample.prompt_tokens)
    per_word = max(0.1, (counts[1] - counts[0]) / extra)
    return per_word, max(0.0, counts[0] - per_word)


@dataclass
class Level:
    """One level to run: ``level`` users or requests/s, ``requests`` to send, ``seconds`` at most."""

    level: float
    requests: int
    seconds: float
    first_index: int  # request numbers continue across levels, so no two prompts repeat by chance


class Load:
    """The check's requests for one shape, with prompts sized by the calibration."""

    def __init__(self, target: Target, shape: Shape, seed: str, per_word: float, overhead: float) -> None:
        self.target, self.shape, self.seed = target, shape, seed
        self.per_word, self.overhead = per_word, overhead

    def text(self, index: int) -> str:
        return prompt_text(self.shape, index, self.seed, self.per_word, self.overhead)

    async def run(
        self,
        session: aiohttp.ClientSession,
        level: Level,
        mode: str,
        stop: asyncio.Event,
        progress: Callable[[int], None],
    ) -> tuple[list[Sample], float]:
        """The level's samples and its duration (first request sent → last answer ended), seconds."""
        t0 = time.perf_counter()
        samples: list[Sample] = []
        numbers = iter(range(level.first_index, level.first_index + level.requests))

        async def request(index: int) -> None:
            samples.append(await send(session, self.target, self.text(index), self.shape.output_tokens, t0))
            progress(len(samples))

        if mode == "rate":
            tasks = await self._arrivals(level, numbers, request, stop)
        else:

            async def user() -> None:
                for index in numbers:
                    if stop.is_set():
                        return
                    await request(index)

            tasks = [asyncio.create_task(user()) for _ in range(int(level.level))]
        cut = await _until(tasks, t0 + level.seconds, stop)
        samples += [Sample(0.0, level.seconds, error=CUT)] * (0 if stop.is_set() else cut)
        ends = [s.started + s.e2e for s in samples]
        return samples, max(ends, default=0.0)

    async def _arrivals(
        self, level: Level, numbers: Iterator[int], request: Callable[[int], Awaitable[None]], stop: asyncio.Event
    ) -> list["asyncio.Task[None]"]:
        """Start requests at Poisson arrivals of ``level.level`` per second (seeded), at most MAX_IN_FLIGHT."""
        rng = random.Random(f"{self.seed}:{level.first_index}")  # noqa: S311 - arrival times, not a secret
        tasks: list[asyncio.Task[None]] = []
        gate = asyncio.Semaphore(MAX_IN_FLIGHT)

        async def gated(index: int) -> None:
            async with gate:
                await request(index)

        deadline = time.perf_counter() + level.seconds
        for index in numbers:
            if stop.is_set() or time.perf_counter() >= deadline:
                break
            tasks.append(asyncio.create_task(gated(index)))
            await _sleep_unless(stop, rng.expovariate(level.level))
        return tasks


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


async def _until(tasks: list["asyncio.Task[None]"], deadline: float, stop: asyncio.Event) -> int:
    """Wait for ``tasks`` until ``deadline`` (perf_counter) or ``stop``; cancel what is left. Returns how
    many requests were cut (users or arrivals still waiting on an answer)."""
    waiter: asyncio.Task[Any] = asyncio.create_task(stop.wait())
    pending: set[asyncio.Task[Any]] = set(tasks)
    while pending and not stop.is_set():
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        _, pending = await asyncio.wait(pending | {waiter}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        pending.discard(waiter)
    waiter.cancel()
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return len(pending)


def session(target: Target) -> aiohttp.ClientSession:
    """A client session sending ``target``'s key: no pool limit, a per-read idle timeout only."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=IDLE_TIMEOUT_S)
    headers = {"Authorization": f"Bearer {target.key}", "Content-Type": "application/json"}
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout, headers=headers)
