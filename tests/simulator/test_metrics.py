"""/metrics in each flavor: parseable, the names Hearth maps, and vLLM's types and labels."""

import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engines.metrics import parse_metrics
from tests.simulator.simproc import MODEL, ROOT, Sim, SimFactory

FIXTURE = ROOT / "tests" / "data" / "vllm" / "vllm-0.32.0-cpu-metrics.txt"  # a real scrape, see its README.md
VLLM = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:cache_config_info": "gauge",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:prompt_tokens_cached": "counter",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:request_success": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
}
RENAMED_IN_V0 = {
    "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm:inter_token_latency_seconds": "vllm:time_per_output_token_seconds",
    "vllm:prefix_cache_queries": "vllm:gpu_prefix_cache_queries",
    "vllm:prefix_cache_hits": "vllm:gpu_prefix_cache_hits",
}
VLLM_V0 = {RENAMED_IN_V0.get(name, name): kind for name, kind in VLLM.items()}
SGLANG = {
    "sglang:num_running_reqs": "gauge",
    "sglang:num_queue_reqs": "gauge",
    "sglang:token_usage": "gauge",
    "sglang:num_used_tokens": "gauge",
    "sglang:cache_hit_rate": "gauge",
    "sglang:gen_throughput": "gauge",
    "sglang:prompt_tokens": "counter",
    "sglang:generation_tokens": "counter",
    "sglang:cached_tokens": "counter",
    "sglang:num_requests": "counter",
    "sglang:time_to_first_token_seconds": "histogram",
    "sglang:inter_token_latency_seconds": "histogram",
    "sglang:e2e_request_latency_seconds": "histogram",
    "sglang:queue_time_seconds": "histogram",
}


def families(text: str, prefix: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text) if f.name.startswith(prefix)}


def label_keys(family: Any) -> set[frozenset[str]]:
    return {frozenset(s.labels) - {"le"} for s in family.samples if not s.name.endswith("_created")}


def one_request(sim: Sim) -> None:
    messages: Any = [{"role": "user", "content": "Hello"}]
    sim.openai().chat.completions.create(model=MODEL, messages=messages, max_tokens=3)


def test_the_vllm_flavor_matches_real_vllm_names_types_and_labels(sim: Sim) -> None:
    one_request(sim)
    ours = families(sim.scrape(), "vllm:")
    real = families(FIXTURE.read_text(), "vllm:")
    assert {name: ours[name].type for name in VLLM if name in ours} == VLLM
    for name, family in ours.items():
        assert name in real, f"{name} is not a vLLM 0.32.0 metric"
        assert family.type == real[name].type, name
        if name == "vllm:cache_config_info":
            assert set(family.samples[0].labels) <= set(real[name].samples[0].labels)
        else:
            assert label_keys(family) == label_keys(real[name]), name
    for sample in ours["vllm:num_requests_running"].samples:
        assert sample.labels == {"engine": "0", "model_name": MODEL}
    info = ours["vllm:cache_config_info"].samples[0].labels
    assert info["block_size"] == "16" and info["kv_cache_size_tokens"] == "65536" and info["num_gpu_blocks"] == "4096"
    assert info["gpu_memory_utilization"] == "0.92" and info["enable_prefix_caching"] == "True"


@pytest.fixture(scope="module")
def flavored(sim_factory: SimFactory) -> dict[str, Sim]:
    """One simulator per other flavor, each with a slow /metrics and one finished request."""
    sims = {}
    for flavor in ("vllm-v0", "sglang"):
        sims[flavor] = sim_factory(
            "--metrics-flavor", flavor, "--served-model-name", MODEL, "--fault-metrics-delay", "0.3"
        )
        one_request(sims[flavor])
    return sims


def test_hearths_own_parser_reads_every_flavor(sim: Sim, flavored: dict[str, Sim]) -> None:
    scrape = parse_metrics(sim.scrape(), "vllm", time.time())
    assert scrape.values["kv_cache_size_tokens"] == 65536
    for flavor, other in flavored.items():
        values = parse_metrics(other.scrape(), flavor, time.time()).values
        assert values["generation_tokens_total"] == 3 and values["prompt_tokens_total"] > 0
        assert {"requests_running", "requests_waiting", "kv_cache_usage"} <= set(values)


@pytest.mark.parametrize(
    ("flavor", "expected", "prefix"), [("vllm-v0", VLLM_V0, "vllm:"), ("sglang", SGLANG, "sglang:")]
)
def test_older_vllm_and_sglang_flavors_have_their_names(
    flavored: dict[str, Sim], flavor: str, expected: dict[str, str], prefix: str
) -> None:
    started = time.monotonic()
    text = flavored[flavor].scrape()
    assert time.monotonic() - started >= 0.3  # --fault-metrics-delay
    found = families(text, prefix)
    assert {name: found[name].type for name in expected if name in found} == expected
    if flavor == "sglang":
        assert not families(text, "vllm:")
        assert all(s.labels.get("model_name") == MODEL for f in found.values() for s in f.samples)
    else:
        assert "vllm:kv_cache_usage_perc" not in found and "vllm:inter_token_latency_seconds" not in found


def test_metrics_content_type_is_prometheus_text(sim: Sim) -> None:
    resp = httpx.get(sim.base + "/metrics")
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
