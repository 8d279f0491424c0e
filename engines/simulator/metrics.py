"""/metrics in three flavors, from one set of canonical events, with prometheus_client.

Names are data (``NAMES``), per flavor:
- ``vllm``: vLLM ≥ 0.11 (V1 engine), vllm/v1/metrics/loggers.py; names, types, labels, help texts and
  histogram buckets checked against a real vLLM 0.32.0 scrape (shared/fixtures/vllm-0.32.0-cpu-metrics.txt).
  With it, sleep mode's ``vllm:engine_sleep_state`` (in that scrape) and, from the first /sleep or /wake_up,
  ``vllm:sleep_mode_operation_duration_seconds`` and ``vllm:sleep_mode_operations_in_flight`` (SLEEP.md).
- ``vllm-v0``: the same with the older names ``vllm:gpu_cache_usage_perc``,
  ``vllm:time_per_output_token_seconds`` and ``vllm:gpu_prefix_cache_{queries,hits}``, and no sleep metrics.
- ``sglang``: python/sglang/srt/metrics/collector.py (labels ``model_name`` only).
Every flavor adds the simulator's own ``hearth_sim_*`` gauges (GPU and host memory held, engines/simulator/sleep.py),
which no engine exports.
Counters are declared without ``_total``: prometheus_client adds it and the ``_created`` series, as in
the fixture. A canonical metric a flavor does not name is simply not exported.
"""

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

_VLLM = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "kv_usage": "vllm:kv_cache_usage_perc",
    "prompt_tokens": "vllm:prompt_tokens",
    "generation_tokens": "vllm:generation_tokens",
    "cached_tokens": "vllm:prompt_tokens_cached",
    "prefix_queries": "vllm:prefix_cache_queries",
    "prefix_hits": "vllm:prefix_cache_hits",
    "preemptions": "vllm:num_preemptions",
    "request_success": "vllm:request_success",
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "cache_config": "vllm:cache_config_info",
    "sleep_state": "vllm:engine_sleep_state",
}
NAMES: dict[str, dict[str, str]] = {
    "vllm": _VLLM,
    "vllm-v0": {
        **{k: v for k, v in _VLLM.items() if k != "sleep_state"},
        "kv_usage": "vllm:gpu_cache_usage_perc",
        "itl": "vllm:time_per_output_token_seconds",
        "prefix_queries": "vllm:gpu_prefix_cache_queries",
        "prefix_hits": "vllm:gpu_prefix_cache_hits",
    },
    "sglang": {
        "running": "sglang:num_running_reqs",
        "waiting": "sglang:num_queue_reqs",
        "kv_usage": "sglang:token_usage",
        "used_tokens": "sglang:num_used_tokens",
        "cache_hit_rate": "sglang:cache_hit_rate",
        "gen_throughput": "sglang:gen_throughput",
        "prompt_tokens": "sglang:prompt_tokens",
        "generation_tokens": "sglang:generation_tokens",
        "cached_tokens": "sglang:cached_tokens",
        "requests": "sglang:num_requests",
        "ttft": "sglang:time_to_first_token_seconds",
        "itl": "sglang:inter_token_latency_seconds",
        "e2e": "sglang:e2e_request_latency_seconds",
        "queue": "sglang:queue_time_seconds",
    },
}
BASE_LABELS = {"vllm": {"engine": "0"}, "vllm-v0": {"engine": "0"}, "sglang": {}}

GAUGES = ("running", "waiting", "kv_usage", "used_tokens", "cache_hit_rate", "gen_throughput")
COUNTERS = ("prompt_tokens", "generation_tokens", "cached_tokens", "prefix_queries", "prefix_hits", "preemptions")
COUNTERS_EXTRA = ("requests",)
HELP = {
    "running": "Number of requests in model execution batches.",
    "waiting": "Number of requests waiting to be processed.",
    "kv_usage": "KV-cache usage. 1 means 100 percent usage.",
    "used_tokens": "The number of used tokens.",
    "cache_hit_rate": "The prefix cache hit rate.",
    "gen_throughput": "The generation throughput (token/s).",
    "prompt_tokens": "Number of prefill tokens processed.",
    "generation_tokens": "Number of generation tokens processed.",
    "cached_tokens": "Number of cached prompt tokens (local + external).",
    "prefix_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "prefix_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "preemptions": "Cumulative number of preemption from the engine.",
    "requests": "Number of requests processed.",
    "request_success": "Count of successfully processed requests.",
    "ttft": "Histogram of time to first token in seconds.",
    "itl": "Histogram of inter-token latency in seconds.",
    "e2e": "Histogram of e2e request latency in seconds.",
    "queue": "Histogram of time spent in WAITING phase for request.",
    "cache_config": "Information of the LLMEngine CacheConfig",
    "sleep_state": "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
    "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
}
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")  # vllm/v1/metrics/loggers.py, 0.32.0
# vLLM's sleep-mode operation metrics (vllm/entrypoints/serve/dev/sleep/metrics.py, 0.32.0): registered at the first
# /sleep or /wake_up, labelled by operation only; seconds.
OPERATION_BUCKETS = (0.01, 0.1, 1, 10, 30, 60, 120, 300, 600)
# The simulator's own gauges, for Hearth's simulated GPU inventory; no vLLM has them. Bytes over all the engine's GPUs.
HEARTH_GAUGES = {
    "gpu_memory_bytes": "GPU memory this engine holds now, bytes, all its GPUs (Hearth simulator only).",
    "gpu_memory_awake_bytes": "GPU memory this engine holds awake, bytes, all its GPUs (Hearth simulator only).",
    "host_memory_bytes": "Host RAM held for the weights of a level-1 sleep, bytes (Hearth simulator only).",
    "weights_loaded": "1 while the GPUs hold the checkpoint's weights, 0 after a level-2 sleep until reload_weights "
    "(Hearth simulator only).",
}
# Buckets as vLLM 0.32.0 exports them (the fixture), seconds.
_LONG = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0]
BUCKETS: dict[str, list[float]] = {
    "ttft": [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0],
    "itl": [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0],
    "e2e": [*_LONG, 960.0, 1920.0, 7680.0],
    "queue": [*_LONG, 960.0, 1920.0, 7680.0],
}
BUCKETS["ttft"] += [40.0, 80.0, 160.0, 640.0, 2560.0]
BUCKETS["itl"] += [80.0]
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")  # the fixture's label values


class SimMetrics:
    """The simulator's own registry; the scheduler reports events, /metrics calls ``render``."""

    def __init__(self, flavor: str, model_name: str, cache_config: dict[str, str]) -> None:
        """Raises KeyError for an unknown flavor."""
        names = NAMES[flavor]
        self.registry = CollectorRegistry()
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        labels = {**BASE_LABELS[flavor], "model_name": model_name}
        keys = list(labels)
        self._gauges = {
            k: Gauge(names[k], HELP[k], keys, registry=self.registry).labels(**labels) for k in GAUGES if k in names
        }
        self._counters = {
            k: Counter(names[k], HELP[k], keys, registry=self.registry).labels(**labels)
            for k in (*COUNTERS, *COUNTERS_EXTRA)
            if k in names
        }
        self._histograms = {
            k: Histogram(names[k], HELP[k], keys, buckets=BUCKETS[k], registry=self.registry).labels(**labels)
            for k in BUCKETS
            if k in names
        }
        self._success: dict[str, Counter] = {}
        if "request_success" in names:
            success_keys = sorted([*keys, "finished_reason"])
            success = Counter(names["request_success"], HELP["request_success"], success_keys, registry=self.registry)
            self._success = {r: success.labels(**labels, finished_reason=r) for r in FINISHED_REASONS}
        if "cache_config" in names:
            info = {**BASE_LABELS[flavor], **cache_config}  # no model_name, as in vLLM
            config = Gauge(names["cache_config"], HELP["cache_config"], sorted(info), registry=self.registry)
            config.labels(**info).set(1)
        self._sleep: dict[str, Gauge] = {}
        if "sleep_state" in names:
            sleep = Gauge(names["sleep_state"], HELP["sleep_state"], [*keys, "sleep_state"], registry=self.registry)
            self._sleep = {state: sleep.labels(**labels, sleep_state=state) for state in SLEEP_STATES}
            self.set_sleep_state(False, 0)
        self._operations: tuple[Histogram, Gauge] | None = None
        self._vllm = flavor == "vllm"
        self._hearth = {
            key: Gauge(f"hearth_sim_{key}", text, ["model_name"], registry=self.registry).labels(model_name=model_name)
            for key, text in HEARTH_GAUGES.items()
        }
        self._generated = 0.0
        self._last_rate = (time.monotonic(), 0.0)

    def count(self, key: str, amount: float = 1.0) -> None:
        """Add ``amount`` to counter ``key`` (tokens or events); also tracks generation for throughput."""
        if key == "generation_tokens":
            self._generated += amount
        if key in self._counters and amount:
            self._counters[key].inc(amount)

    def observe(self, key: str, seconds: float) -> None:
        """Record one latency, seconds, in histogram ``key`` ("ttft", "itl", "e2e", "queue")."""
        if key in self._histograms:
            self._histograms[key].observe(seconds)

    def finished(self, reason: str) -> None:
        """One request finished: ``reason`` is "stop", "length", "abort" or "error"."""
        if reason in self._success:
            self._success[reason].inc()
        self.count("requests")

    def set_state(self, running: int, waiting: int, kv_usage: float, used_tokens: int, hit_rate: float) -> None:
        """Set the gauges: requests, a 0–1 KV usage ratio, tokens held, a 0–1 prefix hit rate.

        ``gen_throughput`` (tokens/s since the previous call) keeps its last busy value when idle, as
        SGLang's does.
        """
        now = time.monotonic()
        then, generated = self._last_rate
        values = {"running": running, "waiting": waiting, "kv_usage": kv_usage}
        values.update({"used_tokens": used_tokens, "cache_hit_rate": hit_rate})
        if self._generated > generated and now > then:
            values["gen_throughput"] = (self._generated - generated) / (now - then)
        self._last_rate = (now, self._generated)
        for key, value in values.items():
            if key in self._gauges:
                self._gauges[key].set(value)

    def set_sleep_state(self, sleeping: bool, level: int) -> None:
        """``vllm:engine_sleep_state`` as vLLM's ``record_sleep_state`` sets it: awake 1, or 0 with level 1
        (``weights_offloaded``) or 2 (``discard_all``) marked; a level-0 sleep marks neither."""
        values = {"awake": not sleeping, "weights_offloaded": sleeping and level == 1}
        values["discard_all"] = sleeping and level == 2
        for state, gauge in self._sleep.items():
            gauge.set(float(values[state]))

    @contextmanager
    def operation(self, name: str) -> Iterator[None]:
        """Time one sleep-mode call ("sleep" or "wake"), failed ones too, into vLLM's operation metrics (the vllm
        flavor; they appear with the first call, as in vLLM)."""
        if not self._vllm:
            yield
            return
        if self._operations is None:
            duration = Histogram(
                "vllm:sleep_mode_operation_duration_seconds",
                "Duration of one sleep-mode operation.",
                ["operation"],
                buckets=OPERATION_BUCKETS,
                registry=self.registry,
            )
            in_flight = Gauge(
                "vllm:sleep_mode_operations_in_flight",
                "Sleep-mode operations currently awaited.",
                ["operation"],
                registry=self.registry,
            )
            self._operations = (duration, in_flight)
        duration, in_flight = self._operations
        started = time.perf_counter()
        in_flight.labels(name).inc()
        try:
            yield
        finally:
            in_flight.labels(name).dec()
            duration.labels(name).observe(time.perf_counter() - started)

    def set_memory(self, values: Iterable[tuple[str, float]]) -> None:
        """Set the Hearth-only gauges (``hearth_sim_<key>``) from (key, value) pairs; sizes in bytes."""
        for key, value in values:
            self._hearth[key].set(value)

    def render(self) -> bytes:
        """The exposition text (Prometheus text format 0.0.4)."""
        return generate_latest(self.registry)
