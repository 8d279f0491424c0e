"""Engine /metrics text → canonical samples, through name mappings kept as data.

The canonical vocabulary (``CANONICAL``) is what the console charts and Hearth's own /metrics re-exports;
``DEFAULT_MAPPINGS`` says, per engine flavor and version range, which engine series gives each canonical name,
with its source. The console seeds its editable mapping table from these rows (console.observability) and
passes the rows in force to ``parse_metrics``; this module holds no state.

Sources of the names:
- ``vllm`` (vLLM ≥ 0.11, V1 engine): vllm/v1/metrics/loggers.py; checked against two real vLLM 0.32.0 CPU scrapes
  (tests/data/vllm/).
- ``vllm-v0`` (vLLM before 0.11): vLLM's docs/design/v1/metrics.md lists the v0 names ``vllm:gpu_cache_usage_perc``,
  ``vllm:time_per_output_token_seconds``; ``vllm:gpu_prefix_cache_{queries,hits}`` became ``prefix_cache_*``.
- ``sglang`` and ``sglang-0.5.7``: python/sglang/srt/metrics/collector.py, from 0.5.10
  observability/metrics_collector.py (SGLang needs ``--enable-metrics``); checked against two real SGLang
  0.5.15.post1 CPU scrapes (tests/data/sglang-0.5.15.post1-cpu-metrics*.txt). SGLang's
  ``sglang:generation_tokens_total`` grows only when a request finishes; ``sglang:realtime_tokens_total
  {mode="decode"}`` (0.5.7 on) grows every decode step, as vLLM's counter does, so ``sglang-0.5.7`` reads
  generated tokens from it (it leaves out each request's first token, which the prefill step makes: 69
  against 72 after three requests in the idle scrape); ``sglang`` (older SGLang, the simulator) from the
  other. ``sglang:max_total_num_tokens`` (0.5.6 on) is the KV pool.
- ``llamacpp``: llama.cpp's tools/server/README.md, "GET /metrics" (``llama-server --metrics``).

A row's ``metric`` may end in a label selector, ``name{label="value",...}``: only those samples count.
Parsing uses prometheus_client's text parser. Values of several label sets add up (ratios average). A canonical
name absent from a scrape is absent from the result: the console shows "no data" with a reason, never 0.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

GAUGE, COUNTER, HISTOGRAM, INFO = "gauge", "counter", "histogram", "info"


@dataclass(frozen=True)
class Canonical:
    """A canonical series: its kind, unit ("requests", "tokens", "ratio" 0–1, "seconds", …) and what it is."""

    kind: str
    unit: str
    what: str


CANONICAL: dict[str, Canonical] = {
    "requests_running": Canonical(GAUGE, "requests", "requests in the running batch"),
    "requests_waiting": Canonical(GAUGE, "requests", "requests queued for the batch"),
    "kv_cache_usage": Canonical(GAUGE, "ratio", "KV-cache use"),
    "kv_cache_size_tokens": Canonical(INFO, "tokens", "KV-cache capacity"),
    "prefix_cache_hit_rate": Canonical(GAUGE, "ratio", "prefix-cache hit rate (engine's own gauge)"),
    "spec_accept_length": Canonical(GAUGE, "tokens", "speculative decoding: mean accepted length"),
    "prompt_tokens_total": Canonical(COUNTER, "tokens", "prompt (prefill) tokens"),
    "generation_tokens_total": Canonical(COUNTER, "tokens", "generated (decode) tokens"),
    "cached_prompt_tokens_total": Canonical(COUNTER, "tokens", "prompt tokens served from the prefix cache"),
    "prefix_cache_queries_total": Canonical(COUNTER, "tokens", "prefix-cache lookups, tokens"),
    "prefix_cache_hits_total": Canonical(COUNTER, "tokens", "prefix-cache hits, tokens"),
    "preemptions_total": Canonical(COUNTER, "preemptions", "preemptions"),
    "spec_draft_tokens_total": Canonical(COUNTER, "tokens", "speculative decoding: draft tokens"),
    "spec_accepted_tokens_total": Canonical(COUNTER, "tokens", "speculative decoding: accepted draft tokens"),
    "ttft_seconds": Canonical(HISTOGRAM, "seconds", "engine-side time to first token"),
    "itl_seconds": Canonical(HISTOGRAM, "seconds", "engine-side inter-token latency"),
    "e2e_seconds": Canonical(HISTOGRAM, "seconds", "engine-side request latency"),
    "queue_seconds": Canonical(HISTOGRAM, "seconds", "time waiting for the batch"),
}
RATIO_METRICS = frozenset(name for name, c in CANONICAL.items() if c.unit == "ratio")


@dataclass(frozen=True)
class MappingRow:
    """One engine series for one canonical name, for an engine flavor over a version range.

    ``metric`` is the sample name as exposed (a counter's with ``_total``; a histogram's base name, without
    ``_bucket``), a gauge's or counter's optionally with a label selector
    (``sglang:realtime_tokens_total{mode="decode"}``); ``label``, when set, names a label of an info gauge
    whose value is the number.
    ``min_version`` inclusive, ``max_version`` exclusive, "" = open. ``source`` cites where the name comes from.
    """

    flavor: str
    engine: str
    canonical: str
    metric: str
    label: str = ""
    min_version: str = ""
    max_version: str = ""
    source: str = ""


_VLLM_SRC = "vllm/v1/metrics/loggers.py; seen in a real vLLM 0.32.0 scrape (tests/data/vllm)"
_VLLM_V0_SRC = "vLLM docs/design/v1/metrics.md, 'v0 Metrics'"
_SGLANG_SRC = "sglang python/sglang/srt/metrics/collector.py; seen in real SGLang 0.5.15.post1 CPU scrapes (tests/data)"
_LLAMACPP_SRC = "llama.cpp tools/server/README.md, GET /metrics"


def _rows(flavor: str, engine: str, lo: str, hi: str, source: str, pairs: dict[str, str]) -> list[MappingRow]:
    out = []
    for canonical, metric in pairs.items():
        name, _, label = metric.partition("@")
        out.append(MappingRow(flavor, engine, canonical, name, label, lo, hi, source))
    return out


_VLLM_COMMON = {
    "requests_running": "vllm:num_requests_running",
    "requests_waiting": "vllm:num_requests_waiting",
    "prompt_tokens_total": "vllm:prompt_tokens_total",
    "generation_tokens_total": "vllm:generation_tokens_total",
    "preemptions_total": "vllm:num_preemptions_total",
    "ttft_seconds": "vllm:time_to_first_token_seconds",
    "e2e_seconds": "vllm:e2e_request_latency_seconds",
    "queue_seconds": "vllm:request_queue_time_seconds",
    "kv_cache_size_tokens": "vllm:cache_config_info@kv_cache_size_tokens",
    "spec_draft_tokens_total": "vllm:spec_decode_num_draft_tokens_total",
    "spec_accepted_tokens_total": "vllm:spec_decode_num_accepted_tokens_total",
}
_SGLANG_COMMON = {
    "requests_running": "sglang:num_running_reqs",
    "requests_waiting": "sglang:num_queue_reqs",
    "kv_cache_usage": "sglang:token_usage",
    "kv_cache_size_tokens": "sglang:max_total_num_tokens",
    "prefix_cache_hit_rate": "sglang:cache_hit_rate",
    "spec_accept_length": "sglang:spec_accept_length",
    "prompt_tokens_total": "sglang:prompt_tokens_total",
    "cached_prompt_tokens_total": "sglang:cached_tokens_total",
    "ttft_seconds": "sglang:time_to_first_token_seconds",
    "itl_seconds": "sglang:inter_token_latency_seconds",
    "e2e_seconds": "sglang:e2e_request_latency_seconds",
    "queue_seconds": "sglang:queue_time_seconds",
}
DEFAULT_MAPPINGS: list[MappingRow] = [
    *_rows(
        "vllm",
        "vllm",
        "0.11",
        "",
        _VLLM_SRC,
        {
            **_VLLM_COMMON,
            "kv_cache_usage": "vllm:kv_cache_usage_perc",
            "cached_prompt_tokens_total": "vllm:prompt_tokens_cached_total",
            "prefix_cache_queries_total": "vllm:prefix_cache_queries_total",
            "prefix_cache_hits_total": "vllm:prefix_cache_hits_total",
            "itl_seconds": "vllm:inter_token_latency_seconds",
        },
    ),
    *_rows(
        "vllm-v0",
        "vllm",
        "",
        "0.11",
        _VLLM_V0_SRC,
        {
            **_VLLM_COMMON,
            "kv_cache_usage": "vllm:gpu_cache_usage_perc",
            "prefix_cache_queries_total": "vllm:gpu_prefix_cache_queries_total",
            "prefix_cache_hits_total": "vllm:gpu_prefix_cache_hits_total",
            "itl_seconds": "vllm:time_per_output_token_seconds",
        },
    ),
    # Before "sglang" so that it wins a tie (both name a series that SGLang >= 0.5.7 has).
    *_rows(
        "sglang-0.5.7",
        "sglang",
        "0.5.7",
        "",
        _SGLANG_SRC,
        {
            **_SGLANG_COMMON,
            "generation_tokens_total": 'sglang:realtime_tokens_total{mode="decode"}',
        },
    ),
    *_rows(
        "sglang",
        "sglang",
        "",
        "",
        _SGLANG_SRC,
        {
            **_SGLANG_COMMON,
            "generation_tokens_total": "sglang:generation_tokens_total",
        },
    ),
    *_rows(
        "llamacpp",
        "llamacpp",
        "",
        "",
        _LLAMACPP_SRC,
        {
            "requests_running": "llamacpp:requests_processing",
            "requests_waiting": "llamacpp:requests_deferred",
            "kv_cache_usage": "llamacpp:kv_cache_usage_ratio",
            "prompt_tokens_total": "llamacpp:prompt_tokens_total",
            "generation_tokens_total": "llamacpp:tokens_predicted_total",
            "spec_draft_tokens_total": "llamacpp:tokens_drafted_total",
            "spec_accepted_tokens_total": "llamacpp:tokens_drafted_accepted_total",
        },
    ),
]

# The engine family whose flavors a deployment's engine kind may speak (the simulator imitates them all).
ENGINE_FAMILIES: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm",),
    "vllm-cpu": ("vllm",),
    "sglang": ("sglang",),
    "sglang-cpu": ("sglang",),
    "llamacpp": ("llamacpp",),
    "simulator": ("vllm", "sglang"),
}


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: ``bounds`` are the finite upper bounds (seconds), ``counts`` the cumulative
    counts at each bound and one more for +Inf (so ``len(counts) == len(bounds) + 1``); ``total`` the sum."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    total: float = 0.0

    @property
    def count(self) -> float:
        return self.counts[-1] if self.counts else 0.0


@dataclass(frozen=True)
class Scrape:
    """One scrape: canonical name → value (tokens, requests, or a 0–1 ratio) and histograms, at ``time``
    (Unix seconds); ``flavor`` the mapping used, ``series`` how many samples the engine exposed."""

    time: float
    values: dict[str, float]
    histograms: dict[str, Histogram] = field(default_factory=dict)
    flavor: str = ""
    series: int = 0


def version_tuple(version: str) -> tuple[int, ...] | None:
    """``"0.32.0"`` → (0, 32, 0); a local part (``+sim``) or suffix (``rc1``) ignored; None if unreadable."""
    parts = []
    for piece in version.lstrip("v").split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None


def split_selector(metric: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A row's metric → (sample name, the label pairs a sample must carry): ``a{m="d"}`` → ("a", (("m", "d"),)).
    Raises ValueError for a selector that is not ``label="value"`` pairs."""
    name, brace, rest = metric.partition("{")
    if not brace:
        return metric, ()
    if not rest.endswith("}"):
        raise ValueError(f"unclosed label selector in {metric!r}")
    pairs = []
    for part in filter(None, (p.strip() for p in rest[:-1].split(","))):
        label, eq, value = part.partition("=")
        if not eq or len(value) < 2 or value[0] != '"' or value[-1] != '"':
            raise ValueError(f'label selector {part!r} in {metric!r} is not label="value"')
        pairs.append((label.strip(), value[1:-1]))
    return name, tuple(pairs)


def _in_range(version: tuple[int, ...], row: MappingRow) -> bool:
    lo, hi = version_tuple(row.min_version), version_tuple(row.max_version)
    return (lo is None or version >= lo) and (hi is None or version < hi)


def sample_names(text: str) -> set[str]:
    """Every sample name in exposition text (histograms also by their base name). Raises ValueError."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


def choose_flavor(engine: str, version: str, present: set[str], rows: Sequence[MappingRow]) -> str:
    """The mapping flavor for a scrape: of the flavors of the engine's family (ENGINE_FAMILIES; an unknown engine
    may use any), the one whose names are most present in the scrape, the engine version Hearth read back
    breaking ties (vLLM 0.10 exposes both spellings); when none of them matches any name (an engine relabelled),
    the flavor of any family matching the most names. "" when nothing matches at all."""
    families = ENGINE_FAMILIES.get(engine)
    parsed = version_tuple(version) if engine != "simulator" else None  # the simulator imitates every flavor
    for pool in ([r for r in rows if families is None or r.engine in families], list(rows)):
        score: dict[str, list[int]] = {}
        for row in pool:
            entry = score.setdefault(row.flavor, [0, 0])
            entry[0] += split_selector(row.metric)[0] in present
            entry[1] = int(parsed is not None and _in_range(parsed, row))
        best = max(score.items(), key=lambda kv: (kv[1][0], kv[1][1]), default=("", [0, 0]))
        if best[1][0] > 0:
            return best[0]
    return ""


def parse_metrics(text: str, rows: Iterable[MappingRow] | str, time: float, flavor: str = "") -> Scrape:
    """Parse Prometheus exposition text with the mapping rows of one flavor.

    ``rows`` may be a flavor name, meaning DEFAULT_MAPPINGS' rows of it. Raises KeyError for an unknown flavor
    name and ValueError for text that is not Prometheus format.
    """
    if isinstance(rows, str):
        flavor = rows
        rows = [r for r in DEFAULT_MAPPINGS if r.flavor == rows]
        if not rows:
            raise KeyError(f"no metric mapping named {flavor!r}")
    scalars: dict[str, list[tuple[str, str, tuple[tuple[str, str], ...]]]] = {}
    histos: dict[str, str] = {}
    for row in rows:
        if CANONICAL.get(row.canonical, Canonical(GAUGE, "", "")).kind == HISTOGRAM:
            histos[row.metric] = row.canonical
        else:
            name, where = split_selector(row.metric)
            scalars.setdefault(name, []).append((row.canonical, row.label, where))
    found: dict[str, list[float]] = {}
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    series = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series += 1
            for canonical, label, where in scalars.get(sample.name, ()):
                if any(sample.labels.get(k) != v for k, v in where):
                    continue
                raw = sample.value if not label else sample.labels.get(label)
                try:
                    found.setdefault(canonical, []).append(float(raw))  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    continue  # a label such as "None": no data
            _histogram_sample(sample.name, sample.labels, sample.value, histos, buckets, sums)
    values = {name: (sum(vs) / len(vs) if name in RATIO_METRICS else sum(vs)) for name, vs in found.items()}
    histograms = {name: _histogram(les, sums.get(name, 0.0)) for name, les in buckets.items()}
    return Scrape(time=time, values=values, histograms=histograms, flavor=flavor, series=series)


def _histogram_sample(
    name: str,
    labels: dict[str, str],
    value: float,
    histos: dict[str, str],
    buckets: dict[str, dict[float, float]],
    sums: dict[str, float],
) -> None:
    base, _, suffix = name.rpartition("_")
    canonical = histos.get(base)
    if canonical is None:
        return
    if suffix == "bucket" and "le" in labels:
        le = float(labels["le"])
        acc = buckets.setdefault(canonical, {})
        acc[le] = acc.get(le, 0.0) + value
    elif suffix == "sum":
        sums[canonical] = sums.get(canonical, 0.0) + value


def _histogram(les: dict[float, float], total: float) -> Histogram:
    bounds = sorted(le for le in les if math.isfinite(le))
    counts = [les[b] for b in bounds] + [les.get(math.inf, les[bounds[-1]] if bounds else 0.0)]
    return Histogram(tuple(bounds), tuple(counts), total)


def counter_delta(older: float, newer: float) -> float:
    """How much a counter grew; a counter that went down means the engine restarted (a reset, as Prometheus's
    ``rate()`` treats it), so all of ``newer`` is new."""
    return newer if newer < older else newer - older


def histogram_delta(older: Histogram | None, newer: Histogram) -> Histogram:
    """The observations between two cumulative histograms; a reset (any count down) or a change of bounds
    keeps all of ``newer``."""
    if older is None or older.bounds != newer.bounds:
        return newer
    if any(n < o for n, o in zip(newer.counts, older.counts, strict=True)):
        return newer
    counts = tuple(n - o for n, o in zip(newer.counts, older.counts, strict=True))
    return Histogram(newer.bounds, counts, max(newer.total - older.total, 0.0))


def add_histograms(parts: Sequence[Histogram]) -> Histogram | None:
    """Observations of several histograms with the same bounds added up (others are left out); None if none."""
    if not parts:
        return None
    first = parts[0]
    same = [p for p in parts if p.bounds == first.bounds]
    counts = tuple(sum(c) for c in zip(*(p.counts for p in same), strict=True))
    return Histogram(first.bounds, counts, sum(p.total for p in same))


@dataclass(frozen=True)
class Quantile:
    """A percentile in seconds; ``beyond`` when it lies past the last finite bucket, so it is only known to be
    above ``seconds`` (shown "> X s")."""

    seconds: float
    beyond: bool = False


def quantile(q: float, hist: Histogram | None) -> Quantile | None:
    """The q-quantile (0–1) of a histogram's observations, interpolated linearly within its bucket as
    Prometheus's ``histogram_quantile`` does (the first bucket starts at 0). None when it holds none."""
    if hist is None or hist.count <= 0:
        return None
    rank = q * hist.count
    lower, below = 0.0, 0.0
    for bound, cumulative in zip(hist.bounds, hist.counts, strict=False):  # counts has +Inf's too
        if cumulative >= rank:
            inside = cumulative - below
            share = (rank - below) / inside if inside > 0 else 1.0
            return Quantile(lower + (bound - lower) * share)
        lower, below = bound, cumulative
    return Quantile(hist.bounds[-1] if hist.bounds else 0.0, beyond=True)


def tokens_per_second(older: Scrape, newer: Scrape, counter: str = "generation_tokens_total") -> float | None:
    """Rate of a token counter between two scrapes, tokens/s; None when either lacks it or no time passed.

    A counter that went down (engine restarted) gives None rather than a guess across the restart.
    """
    if counter not in older.values or counter not in newer.values or newer.time <= older.time:
        return None
    delta = newer.values[counter] - older.values[counter]
    return None if delta < 0 else delta / (newer.time - older.time)
