"""Engine /metrics → canonical samples, against real vLLM 0.32.0 CPU scrapes."""

from pathlib import Path

import pytest

from engines.metrics import Scrape, parse_metrics, tokens_per_second

FIXTURES = Path(__file__).resolve().parent / "data" / "vllm"  # real scrapes, see its README.md


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_it_maps_an_idle_vllm_scrape() -> None:
    scrape = parse_metrics(fixture("vllm-0.32.0-cpu-metrics.txt"), "vllm", 100.0)
    assert scrape.values["requests_running"] == 0
    assert scrape.values["kv_cache_usage"] == 0
    assert "generation_tokens_total" in scrape.values
    assert scrape.values["kv_cache_size_tokens"] == 46_592  # from cache_config_info's label


def test_it_maps_a_vllm_scrape_under_load() -> None:
    scrape = parse_metrics(fixture("vllm-0.32.0-cpu-metrics-under-load.txt"), "vllm", 100.0)
    assert scrape.values["generation_tokens_total"] == 768
    assert scrape.values["prompt_tokens_total"] > 0


def test_a_missing_metric_is_absent_not_zero() -> None:
    scrape = parse_metrics(fixture("vllm-0.32.0-cpu-metrics.txt"), "vllm-v0", 100.0)
    assert "kv_cache_usage" not in scrape.values  # vLLM 0.32 no longer has gpu_cache_usage_perc


def test_it_maps_sglang_names() -> None:
    text = '# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name="m"} 3\n'
    assert parse_metrics(text, "sglang", 1.0).values == {"requests_running": 3}


def test_it_derives_tokens_per_second_from_the_counter() -> None:
    older = Scrape(10.0, {"generation_tokens_total": 100})
    newer = Scrape(12.0, {"generation_tokens_total": 160})
    assert tokens_per_second(older, newer) == 30


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        (Scrape(10.0, {}), Scrape(12.0, {"generation_tokens_total": 5})),
        (Scrape(10.0, {"generation_tokens_total": 500}), Scrape(12.0, {"generation_tokens_total": 5})),
        (Scrape(10.0, {"generation_tokens_total": 1}), Scrape(10.0, {"generation_tokens_total": 5})),
    ],
    ids=["absent", "engine-restarted", "no-time-passed"],
)
def test_it_gives_no_rate_rather_than_a_wrong_one(older: Scrape, newer: Scrape) -> None:
    assert tokens_per_second(older, newer) is None
