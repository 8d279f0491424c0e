"""What a capacity check's samples say, per level of load, and the run held against the plan.

Definitions (as vLLM's ``vllm bench serve`` and NVIDIA's AIPerf report them, so their numbers compare):

- TTFT: request sent → first content token received, seconds. ITL: the gaps between content chunks
  after the first, pooled over requests, seconds. TPOT: per request, (e2e − TTFT) / (output tokens − 1).
- Percentiles interpolate linearly between the nearest ranks (numpy's default, which both use).
- Output tokens/s: the output tokens of the level's successful requests over the level's duration
  (first request sent → last answer ended). Per-user tokens/s: the median of 1 / TPOT.
- Goodput (DistServe, Zhong et al. 2024; vLLM's ``--goodput``): requests per second that succeeded with
  TTFT ≤ the SLO's TTFT and TPOT ≤ its ITL. A failure never meets it.
- Failures: HTTP errors, refusals (4xx: a context too long, a quota), in-stream errors, streams cut
  without their end, timeouts. They count against goodput, so a shorter context never looks faster.
"""

import math
from collections import Counter
from dataclasses import dataclass, field

from engines.metrics import Scrape

CUT = "cut at the check's time bound"  # a request still running when its level's time ran out: the check's limit


@dataclass(frozen=True)
class Sample:
    """One request: ``error`` "" when it succeeded, else its kind; times in seconds from the level's
    start (``started``) or from sending it; token counts as the engine's usage gave them."""

    started: float
    e2e: float
    ttft: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    itls: tuple[float, ...] = ()
    error: str = ""

    @property
    def tpot(self) -> float | None:
        """Seconds per output token after the first; None with fewer than two tokens."""
        if self.ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


@dataclass(frozen=True)
class Slo:
    """Targets: TTFT and ITL (applied to TPOT per request) in seconds."""

    ttft_seconds: float
    itl_seconds: float

    def met(self, sample: Sample) -> bool:
        if sample.error or sample.ttft is None or sample.ttft > self.ttft_seconds:
            return False
        return sample.tpot is None or sample.tpot <= self.itl_seconds


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` (0–100) percentile, linear between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class LevelResult:
    """One level of load (``level``: users, or requests/s in a rate sweep): latencies in seconds,
    throughputs in tokens/s or requests/s, ratios 0–1; None where no request gave the number."""

    level: float
    requests: int
    succeeded: int
    failures: dict[str, int]
    duration_s: float
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p90: float | None
    itl_p99: float | None
    tpot_p50: float | None
    per_user_tokens_per_s: float | None
    output_tokens_per_s: float
    prompt_tokens_per_s: float
    goodput_rps: float
    goodput_ratio: float
    cache_hit_ratio: float | None
    mean_prompt_tokens: float | None
    mean_output_tokens: float | None
    engine: dict[str, float | None] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return self.requests - self.succeeded


def summarize(level: float, samples: list[Sample], duration_s: float, slo: Slo) -> LevelResult:
    """The level's numbers from its samples; ``duration_s`` from its first request sent to its last answer."""
    ok = [s for s in samples if not s.error]
    ttfts = [s.ttft for s in ok if s.ttft is not None]
    itls = [gap for s in ok for gap in s.itls]
    tpots = [t for s in ok if (t := s.tpot) is not None]
    prompt = sum(s.prompt_tokens for s in ok)
    output = sum(s.output_tokens for s in ok)
    seconds = max(duration_s, 1e-9)
    met = sum(1 for s in samples if slo.met(s))
    speeds = [1 / t for t in tpots if t > 0]
    return LevelResult(
        level=level,
        requests=len(samples),
        succeeded=len(ok),
        failures=dict(Counter(s.error for s in samples if s.error)),
        duration_s=duration_s,
        ttft_p50=percentile(ttfts, 50),
        ttft_p90=percentile(ttfts, 90),
        ttft_p99=percentile(ttfts, 99),
        itl_p50=percentile(itls, 50),
        itl_p90=percentile(itls, 90),
        itl_p99=percentile(itls, 99),
        tpot_p50=percentile(tpots, 50),
        per_user_tokens_per_s=percentile(speeds, 50),
        output_tokens_per_s=output / seconds,
        prompt_tokens_per_s=prompt / seconds,
        goodput_rps=met / seconds,
        goodput_ratio=met / len(samples) if samples else 0.0,
        cache_hit_ratio=sum(s.cached_tokens for s in ok) / prompt if prompt else None,
        mean_prompt_tokens=prompt / len(ok) if ok else None,
        mean_output_tokens=output / len(ok) if ok else None,
    )


def engine_window(scrapes: list[Scrape], start: float, end: float) -> dict[str, float | None]:
    """The engine's own numbers over [start, end] (Unix seconds) from its scrapes (canonical names):
    ``kv_cache_peak`` (0–1), ``preemptions`` (the counter's rise), ``running_peak``, ``waiting_peak``,
    ``waiting_mean`` (requests queued, averaged over the scrapes: how much it queued),
    ``running_while_waiting`` (the most requests running while others waited: what the KV cache held
    at once), and ``scrapes`` (how many fell in the window). None where the engine gave no such series.
    The counter's baseline is the last scrape before ``start``, else the first inside."""
    ordered = sorted(scrapes, key=lambda s: s.time)
    inside = [s for s in ordered if start <= s.time <= end]
    before = [s for s in ordered if s.time < start]

    def peak(name: str, among: list[Scrape]) -> float | None:
        found = [s.values[name] for s in among if name in s.values]
        return max(found) if found else None

    queued = [s for s in inside if s.values.get("requests_waiting", 0) > 0]
    waiting = [s.values["requests_waiting"] for s in inside if "requests_waiting" in s.values]
    counters = [s.values["preemptions_total"] for s in [*before[-1:], *inside] if "preemptions_total" in s.values]
    return {
        "kv_cache_peak": peak("kv_cache_usage", inside),
        "preemptions": max(0.0, counters[-1] - counters[0]) if counters else None,
        "running_peak": peak("requests_running", inside),
        "waiting_peak": peak("requests_waiting", inside),
        "waiting_mean": sum(waiting) / len(waiting) if waiting else None,
        "running_while_waiting": peak("requests_running", queued),
        "scrapes": float(len(inside)),
    }


def tokens_label(tokens: float) -> str:
    """``32768`` → "32K", ``1000`` → "1,000 tokens": K only for whole multiples of 1,024."""
    whole = round(tokens)
    return f"{whole // 1024}K" if whole >= 1024 and whole % 1024 == 0 else f"{whole:,} tokens"


def held_against_plan(
    kv_capacity_tokens: int,
    session_tokens: float,
    levels: list[LevelResult],
    slo: Slo,
    unit: str = "sessions",
    block_tokens: int = 1,
) -> str:
    """The run against the plan in one sentence, e.g. "plan: 13.9 sessions of 32K; measured: 12 before
    TTFT p90 passed 2 s". ``levels`` in the order run; a level holds when nothing failed and its TTFT
    p90 is within the SLO; the first that does not names what stopped it (_limit), the check's own time bound
    apart from the deployment's failures. ``unit`` names a level ("sessions", or "requests/s" for a rate sweep).

    A session holds whole KV blocks of ``block_tokens`` tokens (engines.sizing.kv_block_tokens), so the
    plan's sessions are ``kv_capacity_tokens / (ceil(session_tokens / block_tokens) × block_tokens)``: vLLM's
    own ``kv_cache_max_concurrency`` counts the same way (vllm/v1/core/kv_cache_utils.py)."""
    held_tokens = math.ceil(session_tokens / block_tokens) * block_tokens
    blocks = f" ({held_tokens // block_tokens} blocks of {block_tokens})" if held_tokens != session_tokens else ""
    plan = f"plan: {kv_capacity_tokens / held_tokens:,.1f} sessions of {tokens_label(session_tokens)}{blocks}"
    held = [lv for lv in levels if lv.failed == 0 and lv.ttft_p90 is not None and lv.ttft_p90 <= slo.ttft_seconds]
    broke = next((lv for lv in levels if lv not in held), None)
    if not levels:
        measured = "nothing measured"
    elif broke is None:
        measured = f"{_count(levels[-1].level, unit)}, the most run, held TTFT p90 within {slo.ttft_seconds:g} s"
    elif broke is levels[0]:
        measured = f"{_limit(broke, slo)} already at {_count(broke.level, unit)}"
    else:
        best = max(lv.level for lv in held if lv.level < broke.level) if held else 0
        measured = f"{_level(best)} before {_limit(broke, slo)} at {_level(broke.level)}"
    engine = [lv.engine.get("running_while_waiting") for lv in levels]
    held_at_once = max((n for n in engine if n is not None), default=None)
    tail = f"; the engine ran {held_at_once:g} at once while others waited" if held_at_once else ""
    return f"{plan}; measured: {measured}{tail}"


def _limit(broke: LevelResult, slo: Slo) -> str:
    """What stopped the sweep at ``broke``: the deployment (its failures, else TTFT p90 past the SLO) before the
    check's own time bound, which says only that the check ran out of time (CUT), not that the deployment did."""
    cut = broke.failures.get(CUT, 0)
    if broke.failed > cut:
        return f"{broke.failed - cut} of {broke.requests} requests failed"
    if cut == 0 or (broke.ttft_p90 is not None and broke.ttft_p90 > slo.ttft_seconds):
        return f"TTFT p90 passed {slo.ttft_seconds:g} s"
    return f"the check's time bound, not the deployment, cut {cut} of {broke.requests} requests"


def _level(value: float) -> str:
    return f"{value:g}"


def _count(value: float, unit: str) -> str:
    return f"{value:g} {unit.removesuffix('s') if value == 1 and unit == 'sessions' else unit}"
