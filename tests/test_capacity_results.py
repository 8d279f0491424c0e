"""engines.capacity: profiles scaled to a deployment, prompts that share a prefix only when asked, and the
numbers a run's samples give (percentiles, tokens/s, goodput with failures counted, the engine's window,
the run held against the plan)."""

import pytest

from engines.capacity.profiles import PROFILES, prompt_text, shape_for, words
from engines.capacity.results import CUT, Sample, Slo, engine_window, held_against_plan, percentile, summarize
from engines.metrics import Scrape

SLO = Slo(ttft_seconds=2.0, itl_seconds=0.1)


def test_percentiles_interpolate_between_ranks_as_numpy_does() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5  # numpy.percentile([1, 2, 3, 4], 50)
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    assert percentile([5.0], 99) == 5.0 and percentile([], 50) is None


def test_the_coding_agent_profile_is_scaled_to_max_model_len_and_shares_two_thirds() -> None:
    agent = PROFILES["coding-agent"]
    assert shape_for(agent, 131072, True).prompt_tokens == 59_000  # the field guide's median
    small = shape_for(agent, 8192, True)
    assert small.session_tokens <= 8192 - 64 and small.prefix_tokens == int(small.prompt_tokens * 2 / 3)
    assert shape_for(agent, 8192, False).prefix_tokens == 0
    with pytest.raises(ValueError, match="leaves no room"):
        shape_for(PROFILES["chat"], 70, False)


def test_prompts_share_their_prefix_only_when_it_is_on() -> None:
    shared = shape_for(PROFILES["chat"], 4096, True)
    a, b = prompt_text(shared, 1, "run"), prompt_text(shared, 2, "run")
    head = words(shared.prefix_tokens, "run:prefix", 1.0)
    assert a.startswith(head) and b.startswith(head) and a != b
    alone = shape_for(PROFILES["chat"], 4096, False)
    assert prompt_text(alone, 1, "run")[:12] != prompt_text(alone, 2, "run")[:12]
    assert len(prompt_text(alone, 1, "run", tokens_per_word=2.0).split()) < len(prompt_text(alone, 1, "run").split())


def test_a_level_counts_failures_against_goodput_and_throughput_over_its_duration() -> None:
    fast = Sample(
        started=0.0, e2e=2.0, ttft=0.5, output_tokens=31, prompt_tokens=100, cached_tokens=50, itls=(0.05,) * 30
    )
    slow = Sample(started=0.0, e2e=4.0, ttft=3.0, output_tokens=11, prompt_tokens=100, itls=(0.1,) * 10)
    refused = Sample(started=0.0, e2e=0.01, error="refused (HTTP 400)")
    level = summarize(4, [fast, slow, refused], duration_s=4.0, slo=SLO)
    assert (level.requests, level.succeeded, level.failures) == (3, 2, {"refused (HTTP 400)": 1})
    assert level.output_tokens_per_s == (31 + 11) / 4 and level.prompt_tokens_per_s == 200 / 4
    assert level.goodput_rps == 1 / 4 and level.goodput_ratio == pytest.approx(1 / 3)  # only ``fast`` met it
    assert level.ttft_p50 == pytest.approx(1.75) and level.cache_hit_ratio == 0.25
    assert level.tpot_p50 == pytest.approx((0.05 + 0.1) / 2) and level.per_user_tokens_per_s == pytest.approx(15)


def test_the_engine_window_takes_peaks_inside_and_the_counters_rise_from_just_before() -> None:
    scrapes = [
        Scrape(9.0, {"preemptions_total": 4, "kv_cache_usage": 0.9, "requests_running": 1, "requests_waiting": 0}),
        Scrape(11.0, {"preemptions_total": 5, "kv_cache_usage": 0.5, "requests_running": 12, "requests_waiting": 3}),
        Scrape(13.0, {"preemptions_total": 9, "kv_cache_usage": 0.97, "requests_running": 11, "requests_waiting": 0}),
        Scrape(16.0, {"preemptions_total": 20, "kv_cache_usage": 0.1, "requests_running": 0, "requests_waiting": 0}),
    ]
    window = engine_window(scrapes, start=10.0, end=14.0)
    assert window["kv_cache_peak"] == 0.97 and window["preemptions"] == 5  # 9 − 4: from the scrape before
    assert window["running_peak"] == 12 and window["running_while_waiting"] == 12 and window["waiting_mean"] == 1.5
    blind = engine_window([Scrape(11.0, {"kv_cache_usage": 0.4})], 10.0, 14.0)
    assert blind["preemptions"] is None and blind["running_peak"] is None  # no such series: no data, never 0


def level(users: float, ttft_p90: float, failed: int = 0, running: float | None = None) -> object:
    samples = [Sample(0.0, 1.0, ttft=ttft_p90, output_tokens=2)] * 10 + [Sample(0.0, 1.0, error="x")] * failed
    result = summarize(users, samples, 1.0, SLO)
    result.engine = {"running_while_waiting": running}
    return result


def test_the_run_is_held_against_the_plan_in_words() -> None:
    levels = [level(1, 0.2), level(10, 0.9), level(50, 3.1, running=12)]
    assert held_against_plan(455_000, 32768, levels, SLO) == (  # type: ignore[arg-type]
        "plan: 13.9 sessions of 32K; measured: 10 before TTFT p90 passed 2 s at 50; "
        "the engine ran 12 at once while others waited"
    )
    blocks = held_against_plan(46_592, 1997, [level(1, 0.2)], SLO, block_tokens=128)  # type: ignore[list-item]
    assert blocks.startswith("plan: 22.8 sessions of 1,997 tokens (16 blocks of 128); ")  # vLLM's 22.75x
    assert held_against_plan(46_592, 2048, [level(1, 0.2)], SLO, block_tokens=128).startswith(  # type: ignore[list-item]
        "plan: 22.8 sessions of 2K; "
    )
    held = held_against_plan(46_592, 2048, [level(1, 0.2), level(4, 0.3)], SLO)  # type: ignore[list-item]
    assert held == "plan: 22.8 sessions of 2K; measured: 4 sessions, the most run, held TTFT p90 within 2 s"
    failing = held_against_plan(46_592, 1000, [level(1, 0.2), level(8, 0.3, failed=2)], SLO)  # type: ignore[list-item]
    assert failing.endswith("measured: 1 before 2 of 12 requests failed at 8")
    assert "already at 1 session" in held_against_plan(46_592, 1000, [level(1, 2.5)], SLO)  # type: ignore[list-item]


def test_the_headline_names_the_checks_own_time_bound_apart_from_the_deployments_failures() -> None:
    def cut(users: float, ttft_p90: float, cut: int, failed: int = 0) -> object:
        samples = [Sample(0.0, 1.0, ttft=ttft_p90, output_tokens=2)] * 25 + [Sample(0.0, 1.0, error=CUT)] * cut
        return summarize(users, samples + [Sample(0.0, 1.0, error="timeout")] * failed, 1.0, SLO)

    first = held_against_plan(46_592, 1000, [cut(1, 0.2, 1)], SLO)  # type: ignore[list-item]
    assert first.endswith(
        "measured: the check's time bound, not the deployment, cut 1 of 26 requests already at 1 session"
    )
    later = held_against_plan(46_592, 1000, [level(1, 0.2), cut(4, 0.3, 2)], SLO)  # type: ignore[list-item]
    assert later.endswith("measured: 1 before the check's time bound, not the deployment, cut 2 of 27 requests at 4")
    slow = held_against_plan(46_592, 1000, [cut(1, 2.5, 1)], SLO)  # type: ignore[list-item]
    assert slow.endswith("measured: TTFT p90 passed 2 s already at 1 session")
    both = held_against_plan(46_592, 1000, [cut(1, 0.2, 1, failed=3)], SLO)  # type: ignore[list-item]
    assert both.endswith("measured: 3 of 29 requests failed already at 1 session")


def test_the_capacity_tasks_are_registered_under_the_names_they_are_sent_by() -> None:
    from appliance.celery import app
    from console.capacity.runs import CHECK
    from console.capacity.tuning import TUNE

    app.loader.import_default_modules()
    assert {CHECK, TUNE} <= set(app.tasks)
