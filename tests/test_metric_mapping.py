"""Engine /metrics → canonical names, histograms and percentiles: against the real vLLM 0.32.0 scrapes, each of the
simulator's flavors (vllm, vllm-v0, sglang), llama.cpp's names, and a scrape of names nobody maps."""

from pathlib import Path

import pytest

from engines.metric_mappings import DEFAULT_MAPPINGS
from engines.metrics import (
    Histogram,
    choose_flavor,
    counter_delta,
    histogram_delta,
    parse_metrics,
    quantile,
    sample_names,
)
from engines.simulator.metrics import SimMetrics

VLLM = Path(__file__).resolve().parent / "data" / "vllm"  # real scrapes, see its README.md
CACHE = {"block_size": "16", "num_gpu_blocks": "4096", "kv_cache_size_tokens": "65536", "gpu_memory_utilization": "0.9"}


def simulated(flavor: str) -> str:
    """A simulator flavor's exposition after two finished requests and a busy state."""
    sim = SimMetrics(flavor, "llama", CACHE)
    for ttft in (0.05, 0.3):
        sim.observe("ttft", ttft)
        sim.observe("itl", 0.012)
        sim.count("prompt_tokens", 40)
        sim.count("generation_tokens", 16)
        sim.finished("stop")
    sim.set_state(running=3, waiting=2, kv_usage=0.25, used_tokens=900, hit_rate=0.5)
    return sim.render().decode()


def mapped(text: str, engine: str, version: str) -> tuple[str, dict[str, float], set[str]]:
    flavor = choose_flavor(engine, version, sample_names(text), DEFAULT_MAPPINGS)
    scrape = parse_metrics(text, [r for r in DEFAULT_MAPPINGS if r.flavor == flavor], 1.0, flavor)
    return flavor, scrape.values, set(scrape.histograms)


def test_the_real_vllm_0_32_scrape_under_load_maps_every_number_the_panels_show() -> None:
    flavor, values, hists = mapped((VLLM / "vllm-0.32.0-cpu-metrics-under-load.txt").read_text(), "vllm", "0.32.0")
    assert flavor == "vllm"
    assert values["generation_tokens_total"] == 768 and values["prompt_tokens_total"] == 328
    assert values["kv_cache_size_tokens"] == 46_592 and values["kv_cache_usage"] == 0
    assert {"ttft_seconds", "itl_seconds", "e2e_seconds", "queue_seconds"} <= hists
    assert "spec_draft_tokens_total" not in values  # no speculative decoding there: absent, not 0


def test_the_real_vllm_scrape_under_load_gives_prometheus_percentiles() -> None:
    scrape = parse_metrics((VLLM / "vllm-0.32.0-cpu-metrics-under-load.txt").read_text(), "vllm", 1.0)
    ttft = scrape.histograms["ttft_seconds"]
    assert ttft.count == 8  # eight requests: 1 in (0.25, 0.5], 3 in (1, 2.5], 4 in (7.5, 10]
    p50 = quantile(0.5, ttft)
    assert p50 is not None and p50.seconds == 2.5 and not p50.beyond  # rank 4 is the top of (1, 2.5]


@pytest.mark.parametrize("flavor", ["vllm", "vllm-v0", "sglang"])
def test_each_simulator_flavor_is_recognised_by_its_names_and_mapped(flavor: str) -> None:
    chosen, values, hists = mapped(simulated(flavor), "simulator", "0.32.0+sim")
    assert chosen == flavor
    assert values["requests_running"] == 3 and values["requests_waiting"] == 2
    assert values["kv_cache_usage"] == 0.25
    assert values["generation_tokens_total"] == 32 and values["prompt_tokens_total"] == 80
    assert {"ttft_seconds", "itl_seconds"} <= hists


def test_an_old_vllm_version_picks_the_pre_0_11_names() -> None:
    chosen, values, _ = mapped(simulated("vllm-v0"), "vllm", "0.9.2")
    assert chosen == "vllm-v0" and values["kv_cache_usage"] == 0.25  # from vllm:gpu_cache_usage_perc


def test_a_version_that_contradicts_the_names_falls_back_to_the_names() -> None:
    chosen, values, _ = mapped(simulated("vllm-v0"), "vllm", "0.32.0")  # a relabelled old build
    assert chosen == "vllm-v0" and "kv_cache_usage" in values


def test_llama_cpp_names_are_mapped() -> None:
    text = (
        "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 120\n"
        "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 64\n"
        "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.4\n"
        "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n"
    )  # names from llama.cpp's tools/server/README.md ("GET /metrics")
    chosen, values, _ = mapped(text, "llamacpp", "")
    assert chosen == "llamacpp"
    assert values == {
        "prompt_tokens_total": 120,
        "generation_tokens_total": 64,
        "kv_cache_usage": 0.4,
        "requests_running": 1,
    }


def test_a_scrape_of_unknown_names_maps_nothing_rather_than_zeros() -> None:
    text = "# TYPE someengine_busy gauge\nsomeengine_busy 7\n# TYPE someengine_queue gauge\nsomeengine_queue 0\n"
    chosen, values, hists = mapped(text, "vllm", "0.32.0")
    assert chosen == "" and values == {} and hists == set()


def test_a_percentile_past_the_last_finite_bucket_is_only_a_lower_bound() -> None:
    hist = Histogram((0.5, 1.0, 20.0), (1.0, 1.0, 2.0, 10.0))  # 8 of 10 observations above 20 s
    p99 = quantile(0.99, hist)
    assert p99 is not None and p99.beyond and p99.seconds == 20.0
    assert quantile(0.5, Histogram((1.0,), (0.0, 0.0))) is None  # no observation: no percentile


def test_counters_and_histograms_count_an_engine_restart_as_a_reset() -> None:
    assert counter_delta(500.0, 30.0) == 30.0 and counter_delta(500.0, 530.0) == 30.0
    before = Histogram((1.0,), (5.0, 9.0), 12.0)
    after_restart = Histogram((1.0,), (1.0, 2.0), 1.5)
    assert histogram_delta(before, after_restart) == after_restart
    later = Histogram((1.0,), (3.0, 5.0), 4.0)
    assert histogram_delta(after_restart, later).counts == (2.0, 3.0)
