"""Server time of the dashboard and a deployment page per refresh, with 8 ready replicas and 24 h of history, and
the history's size per replica per day.

Fills a database (``DATABASE_URL``; give it an empty PostgreSQL database, e.g. ``hearth_bench``) with 4 ready
deployments × 2 replicas, 24 h of scrape-resolution samples at HEARTH_SCRAPE_INTERVAL (5 s) made from a real
simulator exposition with counters that grow, their 5-minute rollups, the gateway's per-scrape counts, and the
last hour of request-log rows at 2 requests/s per deployment. Then renders, in this process through Django's test
client (server time only, no network), each URL a refresh asks for, each time after a new sample of every
replica (what the scraper adds between refreshes), and prints p50/p99 and the ratio to a
baseline measured in the same run (the login page). Goal (issue 12): p99 under 200 ms per refresh.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hearth_bench .venv/bin/python bench/dashboard_time.py [--reuse]

``--reuse`` times the history a previous run left in that database instead of making it again (~6 minutes).
"""

import gc
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
os.environ.setdefault("DEBUG", "1")
os.environ["HEARTH_SCRAPE_INTERVAL"] = "5"
os.environ.setdefault("ALLOWED_HOSTS", "testserver")  # Django's test client's host name

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from history_fill import DAY, INTERVAL, fill_gateway, fill_history, fill_requests, shift_to_now  # noqa: E402

DEPLOYMENTS, REPLICAS = 4, 2


def build() -> list[int]:
    from django.contrib.auth.models import User

    from console.catalog.models import ModelSource
    from console.deployments.models import Deployment, Replica
    from console.observability import history
    from console.observability.models import MetricSample, RequestLog

    call_command("migrate", verbosity=0)
    User.objects.filter(username="bench").delete()
    User.objects.create_superuser("bench", "", "bench-password-1")
    Deployment.objects.all().delete()
    import json

    config = json.loads((ROOT / "console/catalog/demo/llama-3.1-8b-instruct.json").read_text())["config"]
    model, _ = ModelSource.objects.get_or_create(
        name="llama-8b",
        defaults={
            "kind": "hf",
            "repo_id": "meta-llama/Llama-3.1-8B-Instruct",
            "config": config,
            "revision": "0e9e39f249a16976918f6564b8830bc894c89659",
            "weights_bytes": 16_060_522_496,
        },
    )
    box = "8× NVIDIA H100 80GB HBM3 (79.6 GiB each), simulated (8xH100-80GB)"
    now = time.time()
    ids = []
    for d in range(DEPLOYMENTS):
        plan = {
            "gpu_indices": [2 * d, 2 * d + 1],
            "inventory": box,
            "max_num_seqs": 256,
            "kv_capacity_tokens": 454_880,
            "reasons": [],
        }
        dep = Deployment.objects.create(
            name=f"bench-{d}",
            model=model,
            engine="simulator",
            plan=plan,
            served_model_name=f"bench-{d}",
            max_model_len=8192,
            kv_space_gib=1,
            state="ready",
            replica_count=REPLICAS,
        )
        ids.append(dep.pk)
        for r in range(REPLICAS):
            replica = Replica.objects.create(
                deployment=dep,
                runtime="process",
                runtime_name=f"bench-{d}-{r}",
                host="127.0.0.1",
                port=9,
                engine_api_key="k",
                running=True,
            )
            fill_history(replica, now)
        fill_gateway(dep, now)
        fill_requests(dep, now)
    t0 = time.perf_counter()
    history.roll_up(now, INTERVAL)
    print(
        f"rolled up 24 h in {time.perf_counter() - t0:.1f} s; {MetricSample.objects.count():,} samples, "
        f"{RequestLog.objects.count():,} request log rows"
    )
    return ids


def scrape_once() -> None:
    """A new sample for every replica, now (a copy of its newest seeded one), in place of the one the last call
    added: what the scraper adds between two refreshes, without piling up more samples than a window holds."""
    from console.deployments.models import Replica
    from console.observability.models import MetricSample

    MetricSample.objects.filter(id__in=_added).delete()
    _added.clear()
    now, made = datetime.now(UTC), []
    for replica in Replica.objects.filter(deployment__name__startswith="bench-"):
        r = MetricSample.objects.filter(replica=replica, resolution=0).order_by("-at").first()
        if r is not None:
            values = {**r.values, "bench": True}
            made.append(MetricSample(deployment_id=r.deployment_id, replica=replica, at=now, values=values))
    _added.extend(m.pk for m in MetricSample.objects.bulk_create(made))


_added: list[int] = []  # ids of the samples scrape_once added last


def drop_scrapes() -> None:
    """Remove the samples scrape_once added (in this run or one that was cut short)."""
    from console.observability.models import MetricSample

    MetricSample.objects.filter(values__has_key="bench").delete()
    _added.clear()


def timed(client: Client, url: str, n: int = 30) -> tuple[float, float]:
    """p50 and p99 (seconds) of ``n`` GETs of ``url``, each after a new scrape of every replica."""
    client.get(url)  # warm
    times = []
    for _ in range(n):
        scrape_once()
        t0 = time.perf_counter()
        resp = client.get(url)
        times.append(time.perf_counter() - t0)
        assert resp.status_code == 200, (url, resp.status_code)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]


def big_window(deployment_id: int, n: int = 27_000) -> None:
    """window_stats over ``n`` request-log rows of the last 5 minutes (64 streams make ~90 requests/s), aggregated
    by PostgreSQL and counted in Python: wall time and this process's CPU (what holds the relay's GIL)."""
    from console.deployments.models import Deployment
    from console.observability.models import RequestLog
    from console.observability.request_stats import window_stats

    if connection.vendor != "postgresql":
        return
    now, dep = datetime.now(UTC), Deployment.objects.get(pk=deployment_id)
    RequestLog.objects.bulk_create(
        [
            RequestLog(
                created_at=datetime.fromtimestamp(now.timestamp() - k * 300 / n, UTC),
                model=dep.served_model_name,
                surface="openai",
                endpoint="/v1/chat/completions",
                stream=True,
                status=200,
                finish_reason="length",
                prompt_tokens=128,
                completion_tokens=64,
                ttft_seconds=0.05 + (k % 13) / 100,
                duration_seconds=0.8,
                key_prefix="bench-big-window",
            )
            for k in range(n)
        ],
        batch_size=5000,
    )
    with connection.cursor() as cur:
        cur.execute("ANALYZE observability_requestlog")
    try:
        since = datetime.fromtimestamp(now.timestamp() - 300, UTC)
        for in_database, how in ((True, "aggregated by PostgreSQL"), (False, "counted in Python")):
            walls, cpus = [], []
            for _ in range(8):
                w0, c0 = time.perf_counter(), time.process_time()
                window_stats([dep], since, in_database)
                walls.append(time.perf_counter() - w0)
                cpus.append(time.process_time() - c0)
            print(
                f"a {n:,}-row request window {how}: {statistics.median(walls) * 1000:.0f} ms, of it "
                f"{statistics.median(cpus) * 1000:.0f} ms of this process's CPU"
            )
    finally:
        RequestLog.objects.filter(key_prefix="bench-big-window").delete()


def size_per_replica_day() -> None:
    """Bytes per replica per day: each kind of row's stored size (its JSON as PostgreSQL stores it, plus the
    row's share of the heap and of the indexes beyond that, measured on the table after VACUUM FULL)."""
    if connection.vendor != "postgresql":
        print("(bytes per replica per day: measured on PostgreSQL only)")
        return
    with connection.cursor() as cur:
        cur.execute("VACUUM FULL observability_metricsample")
        cur.execute(
            "SELECT pg_total_relation_size('observability_metricsample'), count(*), "
            "sum(pg_column_size(values)) FROM observability_metricsample"
        )
        total, rows, json_bytes = cur.fetchone()  # type: ignore[misc]
        cur.execute(
            "SELECT replica_id IS NULL, resolution, count(*), avg(pg_column_size(values)) "
            "FROM observability_metricsample GROUP BY 1, 2"
        )
        kinds = {(gw, res): (n, float(avg)) for gw, res, n, avg in cur.fetchall()}
    overhead = (total - json_bytes) / rows  # tuple header, the other columns, index entries
    print(f"history table: {total / 2**20:,.1f} MiB for {rows:,} rows; {overhead:,.0f} B per row besides its JSON")
    per_day = DAY / INTERVAL
    raw = (kinds[(False, 0)][1] + overhead) * per_day
    rollup = (kinds[(False, 300)][1] + overhead) * 288
    gateway = (kinds[(True, 0)][1] + overhead) * per_day
    print(
        f"per replica per day at a {INTERVAL:.0f} s scrape interval: {raw / 2**20:,.1f} MiB of scrape-resolution "
        f"samples (JSON {kinds[(False, 0)][1]:,.0f} B each; kept 24 h) and {rollup / 2**10:,.0f} KiB of rollups "
        f"(kept 30 days: {30 * rollup / 2**20:,.1f} MiB); per deployment with requests every scrape, "
        f"{gateway / 2**20:,.1f} MiB of the gateway's counts per day (none written for a scrape without requests)"
    )


def main() -> None:
    from console.deployments.models import Deployment

    call_command("migrate", verbosity=0)
    kept = list(Deployment.objects.filter(name__startswith="bench-").order_by("pk").values_list("pk", flat=True))
    ids = kept if "--reuse" in sys.argv and len(kept) == DEPLOYMENTS else build()
    if ids is kept:
        drop_scrapes()
        shift_to_now()
    from django.contrib.auth.models import User

    gc.freeze()  # as the web server does at start-up (gateway.app's lifespan): what setup loaded is left out of GC
    client = Client()
    client.force_login(User.objects.get(username="bench"))  # django-axes wants a request for login()
    dep = ids[0]
    now = time.time()
    base = timed(Client(), "/login/")
    urls = [
        ("dashboard page", "/"),
        ("dashboard live refresh (htmx, every 2 s)", "/dashboard/live/"),
        ("deployment page", f"/deployments/{dep}/"),
        ("deployment live panel (htmx, every 2 s)", f"/deployments/{dep}/panel/"),
        ("deployment charts, 1 h (first load)", f"/deployments/{dep}/series/?range=1h"),
        ("deployment charts, 24 h (first load)", f"/deployments/{dep}/series/?range=24h"),
        ("deployment charts, 30 d (first load)", f"/deployments/{dep}/series/?range=30d"),
        ("deployment charts, live update (every 5 s)", f"/deployments/{dep}/series/?range=1h&since={now - 10}"),
    ]
    print(f"\n{DEPLOYMENTS} ready deployments × {REPLICAS} replicas, 24 h of history, {connection.vendor}\n")
    print("| what | p50 ms | p99 ms | p50 vs baseline |")
    print("|---|---|---|---|")
    print(f"| baseline: the login page | {base[0] * 1000:.1f} | {base[1] * 1000:.1f} | 1.0 |")
    results = {}
    for label, url in urls:
        p50, p99 = timed(client, url)
        results[url] = (p50, p99)
        print(f"| {label} | {p50 * 1000:.1f} | {p99 * 1000:.1f} | {p50 / base[0]:.1f} |")
    dash = results["/dashboard/live/"]
    update = f"/deployments/{dep}/series/?range=1h&since={now - 10}"
    page = [a + b for a, b in zip(results[f"/deployments/{dep}/panel/"], results[update], strict=True)]
    worst = max(dash[1], page[1])
    print(
        f"\nper refresh, p50/p99: dashboard {dash[0] * 1000:.0f}/{dash[1] * 1000:.0f} ms, deployment page (panel + "
        f"chart update) {page[0] * 1000:.0f}/{page[1] * 1000:.0f} ms; goal p99 < 200 ms: "
        f"{'met' if worst < 0.2 else 'NOT met'}"
    )
    drop_scrapes()
    big_window(dep)
    size_per_replica_day()


if __name__ == "__main__":
    main()
