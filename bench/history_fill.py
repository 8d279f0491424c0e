"""Generated history for the console's benchmarks (dashboard_time.py, dashboard_load.py): a replica's scrape-resolution
samples made as a simulator's counters would grow, the gateway's per-scrape counts, an hour of request-log rows,
and moving a kept history forward to now. Needs Django set up (the benchmark's own database).
"""

import random
from datetime import UTC, datetime

from django.db import connection
from django.db.models import F

INTERVAL = 5.0  # seconds between samples: HEARTH_SCRAPE_INTERVAL as the benchmarks set it
DAY = 86400


def fill_history(replica: object, now: float, span: float = DAY) -> None:
    """Scrape-resolution samples every INTERVAL over the ``span`` seconds before ``now``."""
    from console.observability.history import _encode_hist
    from console.observability.models import MetricSample, ScrapeHealth
    from engines.metrics import Histogram

    ttft_b = (
        0.001,
        0.005,
        0.01,
        0.02,
        0.04,
        0.06,
        0.08,
        0.1,
        0.25,
        0.5,
        0.75,
        1.0,
        2.5,
        5.0,
        7.5,
        10.0,
        20.0,
        40.0,
        80.0,
        160.0,
        640.0,
        2560.0,
    )
    itl_b = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
    e2e_b = (
        0.3,
        0.5,
        0.8,
        1.0,
        1.5,
        2.0,
        2.5,
        5.0,
        10.0,
        15.0,
        20.0,
        30.0,
        40.0,
        50.0,
        60.0,
        120.0,
        240.0,
        480.0,
        960.0,
        1920.0,
        7680.0,
    )
    rng = random.Random(replica.pk)  # type: ignore[attr-defined]
    names = (
        "prompt_tokens_total",
        "generation_tokens_total",
        "prefix_cache_queries_total",
        "prefix_cache_hits_total",
        "preemptions_total",
        "cached_prompt_tokens_total",
    )
    counters = dict.fromkeys(names, 0.0)
    hist = {
        k: [0.0] * (len(b) + 1)
        for k, b in (("ttft_seconds", ttft_b), ("itl_seconds", itl_b), ("e2e_seconds", e2e_b), ("queue_seconds", e2e_b))
    }
    bounds = {"ttft_seconds": ttft_b, "itl_seconds": itl_b, "e2e_seconds": e2e_b, "queue_seconds": e2e_b}
    rows = []
    steps = int(span / INTERVAL)
    for k in range(steps):
        at = now - span + k * INTERVAL
        n = rng.randint(0, 12)
        counters["prompt_tokens_total"] += n * 128
        counters["generation_tokens_total"] += n * 64
        counters["prefix_cache_queries_total"] += n * 128
        counters["prefix_cache_hits_total"] += n * 40
        for name, counts in hist.items():
            first = rng.randint(3, 9) if name != "itl_seconds" else 1
            for i in range(first, len(counts)):
                counts[i] += n if name != "itl_seconds" else n * 63
        values = {
            "requests_running": float(n),
            "requests_waiting": float(max(0, n - 10)),
            "kv_cache_usage": n / 40,
            "kv_cache_size_tokens": 454_880.0,
            **counters,
        }
        encoded = {k: _encode_hist(Histogram(bounds[k], tuple(c), 0.1 * c[-1])) for k, c in hist.items()}
        rows.append(
            MetricSample(
                deployment_id=replica.deployment_id,
                replica=replica,  # type: ignore[attr-defined]
                at=datetime.fromtimestamp(at, UTC),
                values={"v": values, "h": encoded},
            )
        )
    MetricSample.objects.bulk_create(rows, batch_size=2000)
    ScrapeHealth.objects.create(
        replica=replica, last_attempt_at=datetime.now(UTC), last_success_at=datetime.now(UTC), series=430, flavor="vllm"
    )


def fill_gateway(dep: object, now: float, span: float = DAY) -> None:
    """The gateway's per-scrape counts every INTERVAL over the ``span`` seconds before ``now`` (10 requests each)."""
    from console.observability.models import MetricSample

    rows = []
    for k in range(int(span / INTERVAL)):
        at = now - span + k * INTERVAL
        rows.append(
            MetricSample(
                deployment=dep,
                replica=None,
                at=datetime.fromtimestamp(at, UTC),
                values={
                    "d": {"success": 10, "requests": 10, "errors": 0, "prompt_tokens": 1280, "completion_tokens": 640},
                    "e": {},
                    "uh": {"ttft": {"14": 5, "15": 5}, "itl": {"3": 10}},
                    "last_id": 0,
                },
            )
        )
    MetricSample.objects.bulk_create(rows, batch_size=2000)


def fill_requests(dep: object, now: float) -> None:
    """The last hour of request-log rows before ``now`` at 2 requests/s."""
    from console.observability.models import RequestLog

    rows = [
        RequestLog(
            created_at=datetime.fromtimestamp(now - k * 0.5, UTC),
            model=dep.served_model_name,  # type: ignore[attr-defined]
            surface="openai",
            endpoint="/v1/chat/completions",
            stream=True,
            status=200,
            finish_reason="stop",
            prompt_tokens=128,
            completion_tokens=64,
            ttft_seconds=0.03 + (k % 7) / 100,
            duration_seconds=0.8,
        )
        for k in range(7200)
    ]
    RequestLog.objects.bulk_create(rows, batch_size=2000)


def shift_to_now() -> None:
    """Move a kept history forward so that its newest sample is now (as if scraped until this moment)."""
    from console.observability.models import MetricSample, RequestLog, ScrapeHealth

    newest = MetricSample.objects.order_by("-at").values_list("at", flat=True).first()
    if newest is None:
        return
    shift = datetime.now(UTC) - newest
    MetricSample.objects.update(at=F("at") + shift)
    RequestLog.objects.update(created_at=F("created_at") + shift)
    ScrapeHealth.objects.update(last_attempt_at=datetime.now(UTC), last_success_at=datetime.now(UTC))
    if connection.vendor == "postgresql":  # the update left a dead copy of every row, which scraping never does
        with connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE observability_metricsample")
            cur.execute("VACUUM ANALYZE observability_requestlog")
    from django.core.cache import cache

    cache.clear()
