"""The simulated engine: a FIFO queue, a KV-cache budget, a prefix cache and a step loop that paces tokens.

Model (times in seconds unless named):
- Each engine step prefills the sequences admitted in it and decodes one token for every running
  sequence; it lasts ``uncached prompt tokens / prefill_tokens_per_s`` plus
  ``(decode_ms_per_token + decode_ms_per_seq × running) / 1000``. A newly admitted sequence gets its
  first token at the end of its prefill step, as in vLLM's V1 scheduler.
- KV: the budget is ``kv_cache_tokens // block_size`` blocks. A running sequence holds
  ceil((prompt + generated) / block_size) blocks (the usage gauge). Since the simulator plans each
  answer before decoding, admission reserves a sequence's final footprint (prompt + planned output),
  so nothing is ever preempted; a sequence that does not fit waits, first in first out, as does one
  beyond ``max_num_seqs``.
- Prefix cache: chained hashes of whole prompt blocks (vLLM's block hashing); a sequence skips the
  prefill of its longest cached block-aligned prefix, never the whole prompt (at least one token is
  computed). Queries and hits count tokens, as vLLM's counters do. The cache keeps the most recently
  used ``num_blocks`` block hashes.
"""

import asyncio
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import NamedTuple

from engines.simulator.config import SimConfig
from engines.simulator.metrics import SimMetrics

log = logging.getLogger("engines.simulator")
STATS_LOG_INTERVAL_S = 10.0  # vLLM's default --log-stats interval


class PrefixCache:
    """Block hashes of prompts seen recently, most recently used last."""

    def __init__(self, capacity_blocks: int, block_size: int) -> None:
        self.capacity = capacity_blocks
        self.block_size = block_size
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def hashes(self, ids: list[int]) -> list[int]:
        """One hash per whole block of ``ids``, each chained on the one before."""
        out: list[int] = []
        previous = 0
        for start in range(0, len(ids) - self.block_size + 1, self.block_size):
            previous = hash((previous, *ids[start : start + self.block_size]))
            out.append(previous)
        return out

    def match(self, ids: list[int]) -> int:
        """Tokens of ``ids`` served from the cache: whole blocks, leaving at least one token to compute."""
        usable = (len(ids) - 1) // self.block_size
        hits = 0
        for block in self.hashes(ids)[:usable]:
            if block not in self._blocks:
                break
            self._blocks.move_to_end(block)
            hits += 1
        return hits * self.block_size

    def insert(self, ids: list[int]) -> None:
        """Remember the whole blocks of ``ids``, evicting the least recently used beyond capacity."""
        for block in self.hashes(ids):
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)


class Emission(NamedTuple):
    """Token number ``position`` (from 0) of sequence ``choice`` is ready; ``last``: it was the final one."""

    choice: int
    position: int
    last: bool


@dataclass(eq=False)
class Sequence:
    """One sequence (one choice of a request); token counts in tokens, times ``time.monotonic()``."""

    index: int
    prompt_ids: list[int]
    output_len: int
    finish_reason: str
    job: "Job"
    need_blocks: int
    state: str = "waiting"  # waiting → running → done
    generated: int = 0
    cached_tokens: int = 0
    last_token_at: float = 0.0


@dataclass(eq=False)
class Job:
    """One request's sequences and the queue their tokens arrive on."""

    engine: "Engine"
    arrival: float
    sequences: list[Sequence] = field(default_factory=list)
    queue: asyncio.Queue[Emission] = field(default_factory=asyncio.Queue)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens the first sequence took from the prefix cache (0 until admitted)."""
        return self.sequences[0].cached_tokens if self.sequences else 0

    @property
    def done(self) -> bool:
        return all(s.state == "done" for s in self.sequences)

    async def emissions(self) -> AsyncIterator[Emission]:
        """Emissions in order until every sequence has sent its last token."""
        remaining = sum(1 for s in self.sequences if s.state != "done")
        while remaining:
            emission = await self.queue.get()
            remaining -= emission.last
            yield emission

    def abort(self) -> None:
        """Stop every unfinished sequence and free its KV (a client went away or a fault cut it)."""
        self.engine.abort(self)


class Engine:
    """The step loop; ``submit`` from request handlers, ``run`` once as a background task."""

    def __init__(self, cfg: SimConfig, metrics: SimMetrics) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.total_blocks = cfg.num_blocks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.reserved_blocks = 0
        self.cache = PrefixCache(self.total_blocks, cfg.block_size)
        self._wake = asyncio.Event()
        self._queries = 0
        self._hits = 0
        self._window = {"prompt": 0, "generated": 0, "since": time.monotonic()}

    def blocks(self, tokens: int) -> int:
        """KV blocks that ``tokens`` tokens occupy."""
        return math.ceil(tokens / self.cfg.block_size)

    def submit(self, prompts: list[list[int]], outputs: list[tuple[int, str]]) -> Job:
        """Queue one sequence per (prompt ids, (output tokens, finish reason "stop"|"length"))."""
        job = Job(engine=self, arrival=time.monotonic())
        for index, (ids, (length, reason)) in enumerate(zip(prompts, outputs, strict=True)):
            length = max(1, length)
            need = self.blocks(len(ids) + length)
            job.sequences.append(Sequence(index, ids, length, reason, job, need))
        self.waiting.extend(job.sequences)
        self._wake.set()
        return job

    def abort(self, job: Job) -> None:
        """Drop ``job``'s unfinished sequences, counting them as finished_reason "abort"."""
        for seq in job.sequences:
            if seq.state == "waiting":
                self.waiting.remove(seq)
            elif seq.state == "running":
                self.running.remove(seq)
                self.reserved_blocks -= seq.need_blocks
            else:
                continue
            seq.state = "done"
            self.metrics.finished("abort")
        self._wake.set()

    def state(self) -> tuple[int, int, float, int, float]:
        """(running, waiting, KV usage 0–1, KV tokens held, prefix-cache hit rate 0–1) for the gauges."""
        held = [len(s.prompt_ids) + s.generated for s in self.running]
        usage = sum(self.blocks(t) for t in held) / self.total_blocks if self.total_blocks else 0.0
        rate = self._hits / self._queries if self._queries else 0.0
        return len(self.running), len(self.waiting), usage, sum(held), rate

    def _admit(self, now: float) -> list[Sequence]:
        admitted: list[Sequence] = []
        while self.waiting and len(self.running) < self.cfg.max_num_seqs:
            seq = self.waiting[0]
            if self.reserved_blocks + seq.need_blocks > self.total_blocks:
                break
            self.waiting.popleft()
            seq.state = "running"
            self.reserved_blocks += seq.need_blocks
            self.running.append(seq)
            admitted.append(seq)
            prompt = len(seq.prompt_ids)
            if self.cfg.enable_prefix_caching:
                seq.cached_tokens = self.cache.match(seq.prompt_ids)
                self._queries += prompt
                self._hits += seq.cached_tokens
                self.metrics.count("prefix_queries", prompt)
                self.metrics.count("prefix_hits", seq.cached_tokens)
                self.metrics.count("cached_tokens", seq.cached_tokens)
            self.metrics.count("prompt_tokens", prompt)
            self.metrics.observe("queue", now - seq.job.arrival)
            self._window["prompt"] += prompt
        return admitted

    def _emit(self, seq: Sequence, now: float) -> None:
        self.metrics.observe("ttft" if seq.generated == 0 else "itl", now - (seq.last_token_at or seq.job.arrival))
        seq.last_token_at = now
        seq.generated += 1
        self.metrics.count("generation_tokens")
        self._window["generated"] += 1
        last = seq.generated >= seq.output_len
        seq.job.queue.put_nowait(Emission(seq.index, seq.generated - 1, last))
        if last:
            seq.state = "done"
            self.running.remove(seq)
            self.reserved_blocks -= seq.need_blocks
            self.metrics.finished(seq.finish_reason)
            self.metrics.observe("e2e", now - seq.job.arrival)

    async def run(self) -> None:
        """Step forever: admit, sleep for the step's duration, hand out one token per running sequence."""
        while True:
            admitted = self._admit(time.monotonic())
            if not self.running:
                self._wake.clear()
                await self._wake.wait()
                continue
            prefill = sum(len(s.prompt_ids) - s.cached_tokens for s in admitted)
            step_ms = self.cfg.decode_ms_per_token + self.cfg.decode_ms_per_seq * len(self.running)
            await asyncio.sleep(prefill / self.cfg.prefill_tokens_per_s + step_ms / 1000)
            now = time.monotonic()
            for seq in admitted:
                if self.cfg.enable_prefix_caching:
                    self.cache.insert(seq.prompt_ids)
            for seq in list(self.running):
                self._emit(seq, now)
            self._log_stats(now)

    def _log_stats(self, now: float) -> None:
        elapsed = now - self._window["since"]
        if elapsed < STATS_LOG_INTERVAL_S:
            return
        running, waiting, usage, _, rate = self.state()
        log.info(
            "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
            "Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%",
            self._window["prompt"] / elapsed,
            self._window["generated"] / elapsed,
            running,
            waiting,
            usage * 100,
            rate * 100,
        )
        self._window = {"prompt": 0, "generated": 0, "since": now}
