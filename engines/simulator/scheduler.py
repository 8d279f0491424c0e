"""The simulated engine: vLLM V1's scheduler in miniature, pacing planned answers by a KV budget.

Model (after vllm/v1/core/sched/scheduler.py ``Scheduler.schedule``, 0.32.0; times in seconds unless
named, sizes in tokens):

- **Steps.** Each engine step has a budget of ``max_num_batched_tokens``. Running sequences come
  first, in the order they were admitted: one token each while decoding, or the next chunk of a
  prompt still being prefilled (chunked prefill). Waiting sequences are admitted after them, first
  in first out, while budget, ``max_num_seqs`` and KV blocks allow. A step lasts
  ``prefill tokens / prefill_tokens_per_s`` plus ``(decode_ms_per_token + decode_ms_per_seq × scheduled
  sequences + decode_ms_per_1k_kv_tokens × KV tokens held / 1000) / 1000``: prefill is compute-bound,
  so a longer prompt takes longer to its first token; decode reads every held token's KV.
- **First token.** A sequence's first token comes at the end of the step that computes the last
  chunk of its prompt, as in V1.
- **KV budget** (engines.simulator.kv_blocks). A sequence is admitted only when blocks for its whole
  current length fit (vLLM's ``scheduler_reserve_full_isl``, on by default), so a full cache makes
  new requests wait, counted by ``vllm:num_requests_waiting``. Blocks for generated tokens are taken
  as decoding goes, so sequences admitted together can outgrow the cache.
- **Preemption.** When a running sequence needs a block and none is free, the most recently admitted
  running sequence is preempted (V1's recompute preemption: its blocks are freed, it goes back to the
  front of the queue, and when admitted again its prompt and the tokens generated so far are
  prefilled again, its cached prefix excepted); ``vllm:num_preemptions_total`` counts them. No new
  sequence is admitted in a step that preempted.
- **Prefix cache.** Whole prompt blocks are shared by sequences with the same prefix and stay cached
  after they are freed until evicted; an admitted sequence skips the prefill of its longest cached
  block-aligned prefix, never the whole prompt (at least one token is computed). Queries and hits
  count tokens, at a sequence's first admission, as vLLM's counters do.
- **Priority** (vLLM's ``--scheduling-policy priority``, vllm/v1/core/sched/request_queue.py
  ``PriorityRequestQueue``): the queue is kept in order of the request's ``priority`` field (lower first), then of
  arrival; a preempted sequence goes back in that order too, and the sequence preempted when KV runs out is the
  running one latest in that order, not the most recently admitted. With the default ``fcfs`` the field is ignored.
- **Pause** (vLLM's ``PauseState``, which sleep uses: engine.sleep). ``"new"``: waiting sequences are not
  admitted, running ones go on; ``"all"``: no step at all. ``abort_all`` ends every unfinished sequence with
  finished_reason "abort", as ``pause_scheduler(mode="abort")`` does.
"""

import asyncio
import logging
import math
import time
from collections import deque

from engines.simulator.config import SimConfig
from engines.simulator.jobs import Emission, Job, Sequence
from engines.simulator.kv_blocks import BlockPool, block_hashes
from engines.simulator.metrics import SimMetrics

log = logging.getLogger("engines.simulator")
STATS_LOG_INTERVAL_S = 10.0  # vLLM's default --log-stats interval


class Engine:
    """The step loop; ``submit`` from request handlers, ``run`` once as a background task."""

    def __init__(self, cfg: SimConfig, metrics: SimMetrics) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.pool = BlockPool(cfg.num_blocks, cfg.enable_prefix_caching)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.paused: str | None = None  # None, "new" or "all"
        self._wake = asyncio.Event()
        self._stepped = asyncio.Condition()
        self._queries = 0
        self._hits = 0
        self._window = {"prompt": 0, "generated": 0, "since": time.monotonic()}

    def blocks(self, tokens: int) -> int:
        """KV blocks that ``tokens`` tokens occupy."""
        return math.ceil(tokens / self.cfg.block_size)

    def submit(self, prompts: list[list[int]], outputs: list[tuple[int, str]], priority: int = 0) -> Job:
        """Queue one sequence per (prompt ids, (output tokens, finish reason "stop"|"length")), at ``priority``
        (the request's field; only the priority policy reads it)."""
        job = Job(engine=self, arrival=time.monotonic(), priority=priority)
        for index, (ids, (length, reason)) in enumerate(zip(prompts, outputs, strict=True)):
            hashes = block_hashes(ids, self.cfg.block_size) if self.cfg.enable_prefix_caching else []
            job.sequences.append(Sequence(index, ids, max(1, length), reason, job, hashes))
            self._enqueue(job.sequences[-1])
        self._wake.set()
        return job

    @property
    def by_priority(self) -> bool:
        return self.cfg.scheduling_policy == "priority"

    def _enqueue(self, seq: Sequence, front: bool = False) -> None:
        """Into the queue: at its end (or its ``front``: a preempted sequence) first come first served, else in
        (priority, arrival) order."""
        if not self.by_priority:
            if front:
                self.waiting.appendleft(seq)
            else:
                self.waiting.append(seq)
            return
        place = len(self.waiting)
        while place and _order(self.waiting[place - 1]) > _order(seq):
            place -= 1
        self.waiting.insert(place, seq)

    def abort(self, job: Job) -> None:
        """Drop ``job``'s unfinished sequences, counting them as finished_reason "abort"."""
        for seq in job.sequences:
            if seq.state == "waiting":
                self.waiting.remove(seq)
            elif seq.state == "running":
                self._free(seq)
            else:
                continue
            seq.state = "done"
            self.metrics.finished("abort")
        self._wake.set()

    def abort_all(self) -> None:
        """Abort every unfinished sequence, running or waiting: each gets a last emission marked ``aborted``
        (its tokens so far count), its job records the cut, and finished_reason "abort" is counted."""
        for seq in [*self.running, *self.waiting]:
            if seq.state == "running":
                self._free(seq)
            seq.state = "done"
            seq.job.cut[seq.index] = seq.generated
            seq.job.queue.put_nowait(Emission(seq.index, seq.generated, True, aborted=True))
            self.metrics.finished("abort")
        self.waiting.clear()
        self._wake.set()

    def pause(self, what: str | None) -> None:
        """Pause admission (``"new"``), every step (``"all"``), or nothing (None: resume)."""
        self.paused = what
        self._wake.set()

    async def drained(self) -> None:
        """Return once no sequence is running (what vLLM's pause with mode="wait" waits for)."""
        async with self._stepped:
            await self._stepped.wait_for(lambda: not self.running)

    def forget_prefixes(self) -> bool:
        """Drop the prefix cache (vLLM resets it on every sleep of level 1 or 2); False while blocks are held."""
        return self.pool.forget_cached()

    def state(self) -> tuple[int, int, float, int, float]:
        """(running, waiting, KV usage 0–1, KV tokens held, prefix-cache hit rate 0–1) for the gauges."""
        held = sum(s.computed for s in self.running)
        rate = self._hits / self._queries if self._queries else 0.0
        return len(self.running), len(self.waiting), self.pool.usage(), held, rate

    def _block_hash(self, seq: Sequence, index: int) -> int | None:
        return seq.hashes[index] if index < len(seq.hashes) else None

    def _cost(self, seq: Sequence, tokens: int) -> int:
        """Free blocks ``seq`` would use up to hold ``tokens`` tokens."""
        wanted = range(len(seq.blocks), self.blocks(tokens))
        return sum(self.pool.cost(self._block_hash(seq, i)) for i in wanted)

    def _grow(self, seq: Sequence, tokens: int) -> None:
        for index in range(len(seq.blocks), self.blocks(tokens)):
            h = self._block_hash(seq, index)
            self.pool.take(h)
            seq.blocks.append(h)

    def _free(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pool.release(seq.blocks)
        seq.blocks = []

    def _preempt(self, seq: Sequence) -> None:
        """Recompute preemption: free ``seq``'s KV and put it first in the queue."""
        self._free(seq)
        seq.state, seq.computed = "waiting", 0
        self._enqueue(seq, front=True)
        self.metrics.count("preemptions")

    def _schedule_running(self, budget: int) -> tuple[dict[Sequence, int], bool]:
        """Tokens to compute this step per running sequence, preempting from the tail when KV runs out;
        and whether any sequence was preempted."""
        scheduled: dict[Sequence, int] = {}
        preempted = False
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            n = min(seq.num_tokens - seq.computed, budget)
            while self._cost(seq, seq.computed + n) > self.pool.free:
                victim = max(self.running, key=_order) if self.by_priority else self.running[-1]
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            if seq.state != "running":
                break
            self._grow(seq, seq.computed + n)
            scheduled[seq] = n
            budget -= n
            index += 1
        return scheduled, preempted

    def _admit(self, now: float, budget: int, scheduled: dict[Sequence, int]) -> None:
        """Admit waiting sequences, first in first out, while budget, max_num_seqs and KV allow."""
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            seq = self.waiting[0]
            hits = self._hit_blocks(seq)
            if self._cost(seq, seq.num_tokens) > self.pool.free:
                break
            self.waiting.popleft()
            seq.state = "running"
            self.running.append(seq)
            seq.computed = hits * self.cfg.block_size
            self._grow(seq, seq.computed)
            if not seq.admitted:
                self._first_admission(seq, now)
            n = min(seq.num_tokens - seq.computed, budget)
            self._grow(seq, seq.computed + n)
            scheduled[seq] = n
            budget -= n

    def _hit_blocks(self, seq: Sequence) -> int:
        """Leading whole prompt blocks of ``seq`` in the cache, leaving at least one token to compute."""
        usable = min(len(seq.hashes), (seq.num_tokens - 1) // self.cfg.block_size)
        hits = 0
        while hits < usable and self.pool.cached(seq.hashes[hits]):
            hits += 1
        return hits

    def _first_admission(self, seq: Sequence, now: float) -> None:
        seq.admitted = True
        prompt = len(seq.prompt_ids)
        if self.cfg.enable_prefix_caching:
            seq.cached_tokens = seq.computed
            self._queries += prompt
            self._hits += seq.cached_tokens
            self.metrics.count("prefix_queries", prompt)
            self.metrics.count("prefix_hits", seq.cached_tokens)
            self.metrics.count("cached_tokens", seq.cached_tokens)
        self.metrics.count("prompt_tokens", prompt)
        self.metrics.observe("queue", now - seq.job.arrival)
        self._window["prompt"] += prompt

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
            self._free(seq)
            self.metrics.finished(seq.finish_reason)
            self.metrics.observe("e2e", now - seq.job.arrival)

    def step_seconds(self, scheduled: dict[Sequence, int]) -> float:
        """How long a step computing ``scheduled`` (tokens per sequence) lasts, seconds."""
        prefill = sum(n for seq, n in scheduled.items() if not (n == 1 and seq.generated > 0))
        held = sum(s.computed for s in self.running)
        cfg = self.cfg
        step_ms = cfg.decode_ms_per_token + cfg.decode_ms_per_seq * len(scheduled)
        step_ms += cfg.decode_ms_per_1k_kv_tokens * held / 1000
        return prefill / cfg.prefill_tokens_per_s + step_ms / 1000

    async def run(self) -> None:
        """Step forever: schedule, sleep for the step's duration, then hand out the tokens it made."""
        while True:
            budget = self.cfg.max_num_batched_tokens
            scheduled: dict[Sequence, int] = {}
            preempted = False
            if self.paused != "all":
                scheduled, preempted = self._schedule_running(budget)
            if not preempted and self.paused is None:
                self._admit(time.monotonic(), budget - sum(scheduled.values()), scheduled)
            if not scheduled:
                async with self._stepped:
                    self._stepped.notify_all()
                self._wake.clear()
                await self._wake.wait()
                continue
            await asyncio.sleep(self.step_seconds(scheduled))
            now = time.monotonic()
            for seq, n in scheduled.items():
                if seq.state != "running":  # aborted during the step
                    continue
                seq.computed += n
                if seq.computed == seq.num_tokens:
                    self._emit(seq, now)
            async with self._stepped:
                self._stepped.notify_all()
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


def _order(seq: Sequence) -> tuple[int, float, int]:
    """Where a sequence stands under the priority policy: its request's priority, arrival, then its choice."""
    return seq.job.priority, seq.job.arrival, seq.index
