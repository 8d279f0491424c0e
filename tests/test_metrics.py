"""Engine /metrics → canonical samples, against real vLLM 0.32.0 CPU and SGLang 0.5.15.post1 CPU scrapes."""

from pathlib import Path

import pytest

from engines.metric_mappings import DEFAULT_MAPPINGS
from engines.metrics import Scrape, choose_flavor, parse_metrics, sample_names, split_selector, tokens_per_second

FIXTURES = Path(__file__).resolve().parent / "data" / "vllm"  # real scrapes, see its README.md
DATA = Path(__file__).resolve().parent / "data"  # the SGLang scrapes: their first line says how each was taken
SGLANG_IDLE = (DATA / "sglang-0.5.15.post1-cpu-metrics.txt").read_text()
SGLANG_LOADED = (DATA / "sglang-0.5.15.post1-cpu-metrics-under-load.txt").read_text()


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


def test_a_real_sglang_cpu_scrape_picks_the_realtime_flavor_with_or_without_its_version() -> None:
    for version in ("0.5.15.post1", ""):
        assert choose_flavor("sglang-cpu", version, sample_names(SGLANG_IDLE), DEFAULT_MAPPINGS) == "sglang-0.5.7"
    older = "\n".join(line for line in SGLANG_IDLE.splitlines() if "realtime_tokens" not in line)
    assert choose_flavor("sglang-cpu", "", sample_names(older), DEFAULT_MAPPINGS) == "sglang"


def test_it_maps_an_idle_sglang_cpu_scrape() -> None:
    values = parse_metrics(SGLANG_IDLE, "sglang-0.5.7", 100.0).values
    assert {k: values[k] for k in ("requests_running", "requests_waiting", "kv_cache_usage")} == dict.fromkeys(
        ("requests_running", "requests_waiting", "kv_cache_usage"), 0
    )
    assert values["prompt_tokens_total"] == 90
    assert values["generation_tokens_total"] == 69  # realtime_tokens_total{mode="decode"} only, not its prefill modes
    assert values["kv_cache_size_tokens"] == 46_603  # max_total_num_tokens: the plan's capacity (--max-total-tokens)


def test_it_maps_an_sglang_cpu_scrape_under_load() -> None:
    values = parse_metrics(SGLANG_LOADED, "sglang-0.5.7", 100.0).values
    assert (values["requests_running"], values["requests_waiting"]) == (4, 0)
    assert values["kv_cache_usage"] == 0.01  # 394 of 46,603 tokens, rounded by SGLang to 2 places
    assert values["generation_tokens_total"] == 437  # four streams decoding
    # SGLang's own generation counter waits for requests to finish: it still says 72.
    assert parse_metrics(SGLANG_LOADED, "sglang", 100.0).values["generation_tokens_total"] == 72


def test_sglang_tokens_per_second_moves_while_streams_run() -> None:
    older, newer = parse_metrics(SGLANG_IDLE, "sglang-0.5.7", 0.0), parse_metrics(SGLANG_LOADED, "sglang-0.5.7", 100.0)
    assert tokens_per_second(older, newer) == (437 - 69) / 100


@pytest.mark.parametrize(
    ("metric", "parsed"),
    [
        ("a_total", ("a_total", ())),
        ('a{mode="decode"}', ("a", (("mode", "decode"),))),
        ('a{x="1", y=""}', ("a", (("x", "1"), ("y", "")))),
    ],
)
def test_a_mapping_row_may_select_samples_by_label(metric: str, parsed: tuple[str, object]) -> None:
    assert split_selector(metric) == parsed


@pytest.mark.parametrize("metric", ['a{mode="decode"', "a{mode=decode}", "a{mode}"])
def test_a_malformed_label_selector_is_refused(metric: str) -> None:
    with pytest.raises(ValueError, match="selector"):
        split_selector(metric)


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
