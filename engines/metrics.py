"""Engine /metrics text → canonical samples, through name mappings kept as data.

Parsing uses prometheus_client's text parser. Names per engine and version:
- vLLM ≥ 0.11 (V1 engine): vllm/v1/metrics/loggers.py; checked against vLLM 0.32.0 CPU output in
  ../shared/fixtures/vllm-0.32.0-cpu-metrics.txt.
- older vLLM (V0): ``vllm:gpu_cache_usage_perc`` before it became ``vllm:kv_cache_usage_perc``.
- SGLang: python/sglang/srt/metrics/collector.py (needs ``--enable-metrics``).
A canonical metric absent from a scrape is absent from the result: the console shows "no data", never 0.
"""

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

# canonical name → engine sample name, or (sample name, label) for a number the engine reports as an
# info label. Gauges and counters; values summed over label sets.
METRIC_MAPPINGS: dict[str, dict[str, str | tuple[str, str]]] = {
    "vllm": {
        "requests_running": "vllm:num_requests_running",
        "requests_waiting": "vllm:num_requests_waiting",
        "kv_cache_usage": "vllm:kv_cache_usage_perc",
        "prompt_tokens_total": "vllm:prompt_tokens_total",
        "generation_tokens_total": "vllm:generation_tokens_total",
        "kv_cache_size_tokens": ("vllm:cache_config_info", "kv_cache_size_tokens"),
    },
    "vllm-v0": {
        "requests_running": "vllm:num_requests_running",
        "requests_waiting": "vllm:num_requests_waiting",
        "kv_cache_usage": "vllm:gpu_cache_usage_perc",
        "prompt_tokens_total": "vllm:prompt_tokens_total",
        "generation_tokens_total": "vllm:generation_tokens_total",
    },
    "sglang": {
        "requests_running": "sglang:num_running_reqs",
        "requests_waiting": "sglang:num_queue_reqs",
        "kv_cache_usage": "sglang:token_usage",
        "prompt_tokens_total": "sglang:prompt_tokens_total",
        "generation_tokens_total": "sglang:generation_tokens_total",
    },
}

# Canonical gauges averaged rather than summed when an engine reports several label sets (ratios 0–1).
RATIO_METRICS = frozenset({"kv_cache_usage"})


@dataclass(frozen=True)
class Scrape:
    """One scrape: canonical name → value (tokens, requests, or a 0–1 ratio), at ``time`` (Unix seconds)."""

    time: float
    values: dict[str, float]


def parse_metrics(text: str, mapping: str, time: float) -> Scrape:
    """Parse Prometheus exposition text with the named mapping.

    Raises KeyError for an unknown mapping and ValueError for text that is not Prometheus format.
    """
    wanted: dict[str, list[tuple[str, str | None]]] = {}
    for canonical, source in METRIC_MAPPINGS[mapping].items():
        name, label = (source, None) if isinstance(source, str) else source
        wanted.setdefault(name, []).append((canonical, label))
    found: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for canonical, label in wanted.get(sample.name, ()):
                raw = sample.value if label is None else sample.labels.get(label)
                try:
                    found.setdefault(canonical, []).append(float(raw))  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    continue  # a label such as "None": no data
    values = {name: (sum(vs) / len(vs) if name in RATIO_METRICS else sum(vs)) for name, vs in found.items()}
    return Scrape(time=time, values=values)


def tokens_per_second(older: Scrape, newer: Scrape, counter: str = "generation_tokens_total") -> float | None:
    """Rate of a token counter between two scrapes, tokens/s; None when either lacks it or no time passed.

    A counter that went down (engine restarted) gives None rather than a negative rate.
    """
    if counter not in older.values or counter not in newer.values or newer.time <= older.time:
        return None
    delta = newer.values[counter] - older.values[counter]
    return None if delta < 0 else delta / (newer.time - older.time)
