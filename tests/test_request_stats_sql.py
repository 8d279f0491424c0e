"""The request-log window aggregated by PostgreSQL (request_stats_sql) gives what counting every row in Python
gives (request_stats.RequestStats.add): outcomes, errors by status, tokens, tokens per key, goodput at the SLO,
and the served requests' TTFT and ITL percentiles, on rows of every outcome, with NULLs where the gateway
writes them."""

import random
from datetime import UTC, datetime, timedelta

import pytest

from console.access.models import ApiKey
from console.observability.models import RequestLog, ServiceLevel
from console.observability.outcomes import OUTCOMES, outcome_of
from console.observability.request_stats import window_stats
from console.observability.request_stats_sql import OUTCOME_WHERE
from tests.test_panels import deployment

pytestmark = pytest.mark.django_db


def rows(model: str, n: int, rng: random.Random, keys: list[ApiKey | None]) -> None:
    made, finishes = [], ["stop", "length", "max_tokens", "max_output_tokens", ""]
    for _ in range(n):
        status = rng.choice([200] * 12 + [0, 400, 404, 413, 429, 500, 502])
        completion = None if status != 200 else rng.choice([0, 1, 2, 5, 40, 200])
        ttft = None if status != 200 or rng.random() < 0.05 else rng.uniform(0.01, 3.0)
        made.append(
            RequestLog(
                model=model,
                surface="openai",
                endpoint="/v1/chat/completions",
                stream=True,
                status=status,
                finish_reason=rng.choice(finishes) if status == 200 else "",
                truncated=rng.random() < 0.05,
                client_cancelled=rng.random() < 0.05,
                api_key=rng.choice(keys),
                prompt_tokens=None if rng.random() < 0.1 else rng.randint(1, 4000),
                completion_tokens=completion,
                ttft_seconds=ttft,
                duration_seconds=(ttft or 0.0) + rng.uniform(0.0, 20.0),
            )
        )
    RequestLog.objects.bulk_create(made)


def test_postgresql_aggregates_equal_the_rows_counted_in_python() -> None:
    a, b, idle = deployment("agg-a"), deployment("agg-b"), deployment("agg-idle")
    ServiceLevel.objects.create(deployment=a, ttft_seconds=1.0, itl_seconds=0.05)
    ServiceLevel.objects.create(deployment=b, ttft_seconds=0.5)
    keys = [ApiKey.objects.create(name=f"k{i}", prefix=f"hk-agg{i}", key_hash=f"{i:064d}") for i in range(3)]
    rng = random.Random(12)
    rows("agg-a", 700, rng, [*keys, None])
    rows("agg-b", 300, rng, keys[:1])
    since = datetime.now(UTC) - timedelta(minutes=5)
    in_db = window_stats([a, b, idle], since, in_database=True)
    in_python = window_stats([a, b, idle], since, in_database=False)
    for dep in (a, b, idle):
        sql, py = in_db[dep.pk], in_python[dep.pk]
        assert sql.outcomes == py.outcomes and sql.errors_by_status == py.errors_by_status
        assert (sql.prompt_tokens, sql.completion_tokens, sql.met_slo) == (
            py.prompt_tokens,
            py.completion_tokens,
            py.met_slo,
        )
        assert sql.tokens_by_key == py.tokens_by_key
        assert (sql.ttft_count, sql.itl_count) == (py.ttft_count, py.itl_count)
        for which in ("ttft", "itl"):
            for q, value in py.quantiles(which).items():
                assert sql.quantiles(which)[q] == pytest.approx(value, abs=1e-9), (dep.name, which, q)
    assert in_db[a.pk].met_slo > 0 and in_db[b.pk].met_slo > 0 and in_db[a.pk].errors > 0
    assert in_db[idle.pk].total == 0 and in_db[idle.pk].ttft_q == {"p50": None, "p90": None, "p99": None}


def test_each_outcomes_condition_finds_the_rows_outcome_of_names_and_no_other() -> None:
    """OUTCOME_WHERE is what the request log's outcome filter and Usage's Errors and Refused columns read."""
    rows("where", 600, random.Random(7), [None])
    named: dict[str, set[int]] = {outcome: set() for outcome in OUTCOMES}
    for r in RequestLog.objects.all():
        named[outcome_of(r.status, r.finish_reason, r.truncated, r.client_cancelled, r.completion_tokens)].add(r.pk)
    assert set(OUTCOME_WHERE) == set(OUTCOMES) and all(named.values()), {k: len(v) for k, v in named.items()}
    for outcome, where in OUTCOME_WHERE.items():
        assert set(RequestLog.objects.filter(where).values_list("pk", flat=True)) == named[outcome], outcome
