"""The canonical metric vocabulary and which engine series gives each name, per engine flavor and version range.

``CANONICAL`` is what the console charts and Hearth's own /metrics re-exports; ``DEFAULT_MAPPINGS`` says, per
engine flavor and version range, which engine series gives each canonical name, with its source. The console
seeds its editable mapping table from these rows (console.observability); engines.metrics parses a scrape with
the rows in force. Data only: no parsing here.

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
"""

from dataclasses import dataclass

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
