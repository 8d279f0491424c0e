"""The panels' numbers from the history: honesty rules (stale, failing replicas left out of sums, reasons for no
data), cost per million tokens from the same numbers the throughput panel shows, the price per token the gateway
reads, rollups and retention, and the worker-published GPU inventory."""

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import redis
from django.conf import settings
from django.test import Client, override_settings

from appliance import hardware
from console.catalog.models import ModelSource
from console.deployments.models import Deployment, Replica
from console.observability import cost, history, pricing, scraping
from console.observability.history import ROLLUP
from console.observability.mappings import mapping_rows
from console.observability.models import (
    DeploymentPrice,
    MetricSample,
    PriceSetting,
    RequestLog,
    Resolution,
    ScrapeHealth,
    ServiceLevel,
)
from console.observability.panel import live_panel
from console.observability.request_stats import window_stats
from engines.gpus import simulated_inventory
from engines.simulator.metrics import SimMetrics
from tests.simworld import ensure_model

pytestmark = pytest.mark.django_db
H100_BOX = "8× NVIDIA H100 80GB HBM3 (79.6 GiB each), simulated (8xH100-80GB)"
INTERVAL = settings.HEARTH_SCRAPE_INTERVAL


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    history.bounds_id.cache_clear()
    history.bounds_of.cache_clear()
    yield
    redis.Redis.from_url(settings.REDIS_URL).delete(hardware.published_key())  # no inventory left for other tests


def deployment(name: str = "llama", replicas: int = 1, gpus: int = 1) -> Deployment:
    ensure_model()
    plan = {
        "gpu_indices": list(range(gpus * replicas)),
        "inventory": H100_BOX,
        "max_num_seqs": 64,
        "kv_capacity_tokens": 65_536,
        "reasons": [],
    }
    model = ModelSource.objects.get(name="llama-8b")
    dep = Deployment.objects.create(
        name=name,
        model=model,
        engine="simulator",
        served_model_name=name,
        max_model_len=8192,
        kv_space_gib=1,
        plan=plan,
        state="ready",
        replica_count=replicas,
    )
    for n in range(replicas):
        Replica.objects.create(
            deployment=dep,
            runtime="process",
            runtime_name=f"{name}-{n}",
            host="127.0.0.1",
            port=1 + n,
            engine_api_key="k",
            running=True,
        )
    return dep


class Engine:
    """A simulator's metrics registry for one replica, advanced by hand and scraped through scraping's path."""

    def __init__(self, replica: Replica, flavor: str = "vllm") -> None:
        self.replica, self.sim = (
            replica,
            SimMetrics(flavor, replica.deployment.served_model_name, {"kv_cache_size_tokens": "65536"}),
        )

    def step(self, at: float, prompt: int, generated: int, running: int, kv: float) -> None:
        self.sim.count("prompt_tokens", prompt)
        self.sim.count("generation_tokens", generated)
        self.sim.observe("ttft", 0.08)
        self.sim.set_state(running=running, waiting=1, kv_usage=kv, used_tokens=0, hit_rate=0.0)
        scraping._record(self.replica, (at, self.sim.render().decode()), mapping_rows())
        ScrapeHealth.objects.filter(replica=self.replica).update(last_success_at=history.to_datetime(at))

    def fail(self, at: float) -> None:
        scraping._record(self.replica, ConnectionError("timed out"), mapping_rows())  # type: ignore[arg-type]


def test_a_replica_whose_scrapes_fail_is_flagged_and_left_out_of_the_sums() -> None:
    dep = deployment(replicas=2)
    a, b = (Engine(r) for r in dep.replicas.order_by("id"))
    now = time.time()
    for k in range(4):
        a.step(now - 3 * INTERVAL + k * INTERVAL, 100, 50, running=4, kv=0.5)
    b.step(now - 30 * INTERVAL, 100, 50, running=9, kv=0.9)  # answered long ago, nothing since
    panel = live_panel(dep, now)
    assert [r.name for r in panel.failing] == ["llama-1"]
    assert panel.values["requests_running"] == 4  # b's 9 is not added, nor counted as 0 in the KV average
    assert panel.values["kv_cache_usage"] == 0.5
    assert panel.values["generation_tokens_per_second"] == pytest.approx(50 / INTERVAL)


def test_a_panel_without_a_good_scrape_for_three_intervals_is_stale_and_has_no_numbers() -> None:
    dep = deployment()
    engine = Engine(dep.replicas.get())
    now = time.time()
    engine.step(now - 10 * INTERVAL, 10, 10, running=1, kv=0.1)
    panel = live_panel(dep, now)
    assert panel.stale and panel.values == {}
    assert "no replica's /metrics answered" in panel.reasons["kv_cache_usage"]


def test_a_metric_the_engine_does_not_expose_says_so(admin: Client) -> None:
    dep = deployment()
    engine = Engine(dep.replicas.get(), flavor="sglang")
    now = time.time()
    engine.step(now - INTERVAL, 10, 10, running=1, kv=0.1)
    engine.step(now, 10, 10, running=1, kv=0.1)
    panel = live_panel(dep, now)
    assert "kv_cache_size_tokens" not in panel.values
    # SGLang has a capacity series (its mapping rows name it); this engine's scrape lacks it, and says which
    assert panel.reasons["kv_cache_size_tokens"] == "the engine's scrape has no sglang:max_total_num_tokens"
    html = admin.get(f"/deployments/{dep.pk}/panel/").text
    assert 'data-field="kv_cache_size_tokens">no data<' in html and number(html, "kv_cache_usage") == "10.0 %"


def test_a_panel_before_any_scrape_says_its_throughput_has_no_data_yet_once(admin: Client) -> None:
    dep = deployment(gpus=2)
    html = admin.get(f"/deployments/{dep.pk}/panel/").text
    assert "prompt and generation: no data yet" in html and "generation_tokens_per_second" not in html


def number(html: str, field: str) -> str:
    match = re.search(rf'data-field="{field}">([^<]*)<', html)
    assert match, f"no {field}"
    return match.group(1)


# a scrape is fresh for 3 intervals: at the tests' 1 s, a busy CI box took longer than that from the last step to the
# page, which then read as stale ("no data"); the steps stay INTERVAL apart
@override_settings(HEARTH_SCRAPE_INTERVAL=30)
def test_cost_per_million_tokens_is_the_hourly_price_over_the_throughput_the_panel_shows(admin: Client) -> None:
    dep = deployment(gpus=2)
    engine = Engine(dep.replicas.get())
    now = time.time()
    for k in range(5):
        engine.step(now - 4 * INTERVAL + k * INTERVAL, 300, 900, running=8, kv=0.4)
    html = admin.get(f"/deployments/{dep.pk}/panel/").text
    tokens_per_s = float(number(html, "tokens_per_second").replace(",", ""))
    per_hour = Decimal(number(html, "usd_per_hour").lstrip("$"))
    assert per_hour == Decimal("6.00")  # 2 GPUs × the seeded $3.00 per H100-hour
    shown = Decimal(number(html, "usd_per_million").split()[0].lstrip("$"))  # "$2.78 / M tokens"
    assert number(html, "use_5m").startswith("at ") and number(html, "use_5m").endswith(" tokens/s")  # what it divides
    expected = per_hour / (Decimal(str(tokens_per_s)) * 3600) * 1_000_000
    assert abs(shown - expected) <= Decimal("0.005") + expected * Decimal("0.001")  # display rounding only


def test_a_stopped_deployment_on_priced_gpus_shows_no_hourly_cost_on_the_dashboard(admin: Client) -> None:
    dep = deployment(gpus=2)
    Deployment.objects.filter(pk=dep.pk).update(state="stopped")
    html = admin.get("/").text
    assert 'title="$6.00 an hour while it runs">not running<' in html and "$6.00</td>" not in html


def test_the_price_per_token_is_published_for_the_gateway_and_deleted_once_gone() -> None:
    dep = deployment()
    assert pricing.publish_price(dep) is None  # no capacity measured, no estimate from this plan: nothing, never $0
    DeploymentPrice.objects.create(deployment=dep, measured_tokens_per_second=1200.0, measured_run_id=1)
    written = pricing.publish_price(dep)
    assert (
        written is not None
        and Decimal(written) == (Decimal("3.00") / (1200 * 3600) * 10**6).quantize(Decimal("0.0001")) / 10**6
    )
    r = redis.Redis.from_url(settings.REDIS_URL)
    assert r.get(cost.price_per_token(dep.pk)) == written.encode()
    assert pricing.PRICE_TTL - 5 < r.ttl(cost.price_per_token(dep.pk)) <= pricing.PRICE_TTL  # outlives a busy worker
    PriceSetting.objects.all().delete()  # the GPU's price removed: charged nothing from the next scrape
    assert pricing.publish_price(dep) is None and r.get(cost.price_per_token(dep.pk)) is None


def test_a_deployment_on_a_gpu_without_a_price_has_no_cost_not_zero() -> None:
    dep = deployment()
    dep.plan["inventory"] = "1× NVIDIA B200 (179.1 GiB each), simulated (1xB200)"
    hourly = cost.hourly_cost(dep)
    assert hourly.usd_per_hour is None and "no price" in hourly.reason


@override_settings(HEARTH_SCRAPE_INTERVAL=10)  # 60 scrapes make the two periods (600 at the tests' 1 s took a minute)
def test_history_rolls_up_into_five_minute_periods_and_prunes_past_retention() -> None:
    every = settings.HEARTH_SCRAPE_INTERVAL
    dep = deployment()
    engine = Engine(dep.replicas.get())
    start = (time.time() // ROLLUP - 3) * ROLLUP
    for k in range(int(2 * ROLLUP / every)):  # two whole periods
        engine.step(start + k * every, 10, 20, running=2, kv=0.25)
    assert history.roll_up(start + 3 * ROLLUP, every) == 2
    rollups = list(MetricSample.objects.filter(resolution=Resolution.FIVE_MINUTES).order_by("at"))
    assert [r.at.timestamp() for r in rollups] == [start, start + ROLLUP]
    assert rollups[1].values["d"]["generation_tokens_total"] == pytest.approx(20 * ROLLUP / every)
    assert rollups[0].values["v"]["kv_cache_usage"] == 0.25
    assert history.roll_up(start + 3 * ROLLUP, every) == 0  # nothing rolled up twice
    removed = history.prune(start + history.RAW_KEEP.total_seconds() + 3 * ROLLUP)
    assert removed == 2 * ROLLUP / every and MetricSample.objects.filter(resolution=Resolution.SCRAPE).count() == 0
    assert MetricSample.objects.filter(resolution=Resolution.FIVE_MINUTES).count() == 2


def test_under_auto_the_workers_published_inventory_is_planned_against() -> None:
    box = simulated_inventory("8xH100-80GB")
    hardware.publish(box.__class__(box.source, box.devices, read_at=time.time() - 2), [])
    with override_settings(HEARTH_GPU_INVENTORY="auto"):  # this process has no NVML
        found = hardware.current_inventory()
    assert len(found.devices) == 8 and found.source == "sim:8xH100-80GB"
    assert found.origin.startswith("the worker on ") and re.search(r"\b[2-9] s ago", found.provenance(time.time()))


def test_an_old_published_inventory_is_still_shown_with_its_age_when_nothing_else_is_readable(admin: Client) -> None:
    box = simulated_inventory("8xH100-80GB")
    hardware.publish(box.__class__(box.source, box.devices, read_at=time.time() - 600), [])
    with override_settings(HEARTH_GPU_INVENTORY="auto"):
        html = admin.get("/deployments/").text
    # 600 s, or a few more when the box is busy while the page is made
    assert "8× NVIDIA H100" in html and re.search(r"\b60\d s ago", html) and 'class="inventory stale"' in html


def log_row(model: str, status: int = 200, ttft: float | None = 0.05, **fields: object) -> RequestLog:
    values = {
        "surface": "openai",
        "endpoint": "/v1/chat/completions",
        "stream": True,
        "finish_reason": "stop",
        "prompt_tokens": 10,
        "completion_tokens": 11,
        "duration_seconds": 0.55,
        **fields,
    }
    return RequestLog.objects.create(model=model, status=status, ttft_seconds=ttft, **values)


def test_goodput_is_the_share_of_requests_that_met_the_slo_and_refusals_are_apart_from_errors_not_speed() -> None:
    dep = deployment()
    ServiceLevel.objects.create(deployment=dep, ttft_seconds=0.1, itl_seconds=0.06)
    log_row("llama", ttft=0.05)  # ITL (0.55 - 0.05) / 10 = 0.05 s: met
    log_row("llama", ttft=0.2)  # TTFT over the target
    log_row("llama", status=400, ttft=None, completion_tokens=None, finish_reason="")  # context-length refusal
    log_row("llama", finish_reason="length")  # cut at max_tokens: served, and met
    for in_database in (True, False):  # PostgreSQL's aggregates, and the rows counted in Python
        stats = window_stats([dep], datetime.now(UTC) - timedelta(minutes=5), in_database)[dep.pk]
        assert stats.outcomes["success"] == 2 and stats.outcomes["refused"] == 1 and stats.outcomes["length"] == 1
        assert stats.goodput == 0.5 and stats.error_rate == 0.0 and stats.refusal_rate == 0.25
        assert stats.ttft_count == 3 and stats.ttft_q["p50"] == 0.05  # the refusal's missing TTFT is not a fast one


def test_the_request_log_page_filters_by_outcome(admin: Client) -> None:
    log_row("llama")
    log_row("llama", status=429, ttft=None)
    log_row("llama", truncated=True)
    log_row("llama", endpoint="/v1/responses", finish_reason="max_output_tokens")  # a Responses answer cut short
    page = admin.get("/requests/?outcome=refused").text
    assert page.count('data-field="outcome">refused') == 1 and 'data-field="outcome">success' not in page
    assert admin.get("/requests/").text.count('data-field="outcome"') == 4
    cut = admin.get("/requests/?outcome=length").text
    assert cut.count('data-field="outcome">length') == 1 and "/v1/responses" in cut
    assert '<small class="muted">max_output_tokens</small>' in cut  # the API's own word, beside the outcome
    log_row("llama", finish_reason="length")
    cut = admin.get("/requests/?outcome=length").text
    assert cut.count('data-field="outcome">length</td>') == 1  # not "length length" (a fresh user's trial)


def test_a_request_whose_client_left_before_any_answer_shows_no_status_not_zero(admin: Client) -> None:
    log_row("llama", status=0, ttft=None, completion_tokens=None, finish_reason="", client_cancelled=True)
    page = admin.get("/requests/?outcome=cancelled").text
    assert re.search(r'data-field="status"><span class="muted" title="No answer had begun[^"]*">—<', page)
    assert 'data-field="outcome">cancelled' in page


def test_an_admin_adds_a_metric_mapping_in_the_console_and_scrapes_use_it(admin: Client) -> None:
    resp = admin.post(
        "/metric-mappings/",
        {
            "flavor": "myengine",
            "engine": "myengine",
            "canonical": "requests_running",
            "metric": "my_busy",
            "source": "its docs",
        },
    )
    assert resp.status_code == 302
    rows = mapping_rows()
    assert any(r.flavor == "myengine" and r.metric == "my_busy" for r in rows)
    text = "# TYPE my_busy gauge\nmy_busy 3\n"
    assert scraping.choose_flavor("myengine", "", {"my_busy"}, rows) == "myengine"
    assert scraping.parse_metrics(text, [r for r in rows if r.flavor == "myengine"], 1.0).values == {
        "requests_running": 3
    }


def test_the_costs_page_says_when_no_key_was_charged_rather_than_showing_an_empty_table(admin: Client) -> None:
    deployment()
    assert "No request in the last 7 days." in admin.get("/costs/").text


def test_a_keys_refused_requests_leave_no_row_in_the_cost_per_key() -> None:
    from console.access.models import ApiKey

    deployment()
    key = ApiKey.objects.create(name="laptop", prefix="hk-laptop00", key_hash="x")
    log_row("llama", api_key=key, prompt_tokens=10, completion_tokens=5)
    for model in ("gpt-4o", "", "llama"):  # a model no deployment serves, none named, and a refusal on llama
        log_row(model, api_key=key, status=404, prompt_tokens=None, completion_tokens=None, ttft=None)
    costs = cost.key_costs(datetime.now(UTC).date())
    assert [(k.deployment, k.key_name, k.tokens) for k in costs] == [("llama", "laptop", 15)]


def test_a_member_sees_their_own_keys_usage_by_name_and_everyone_elses_only_as_a_sum(
    admin: Client, django_user_model: type
) -> None:
    from console.access.models import ApiKey, Member

    dep = deployment()
    bob = django_user_model.objects.create_user("bob", "", "bobs-password-1")  # type: ignore[attr-defined]
    Member.objects.create(user=bob, role="member")
    mine = ApiKey.objects.create(name="bob's laptop", prefix="hk-bobbobbo", key_hash="x", owner=bob)
    theirs = [ApiKey.objects.create(name=f"team key {n}", prefix=f"hk-team000{n}", key_hash="x") for n in (1, 2)]
    for key, tokens in ((mine, 100), (theirs[0], 300), (theirs[1], 600)):
        log_row("llama", api_key=key, prompt_tokens=tokens, completion_tokens=0)
    member = Client()
    member.force_login(bob)
    for path in (f"/deployments/{dep.pk}/panel/", "/costs/"):
        html = member.get(path).text
        assert "bob&#x27;s laptop" in html and "other keys" in html and "team key" not in html, path
        assert "team key 1" in admin.get(path).text  # an admin sees every key by name
    shares = {k.key_name: k for k in cost.visible_to(cost.key_costs(datetime.now(UTC).date(), dep), {mine.pk})}
    assert (shares["other keys"].tokens, round(shares["other keys"].share, 3)) == (900, 0.9)


def test_a_panel_says_a_new_deployment_has_not_been_launched_and_a_stopped_one_is_stopped() -> None:
    new = Deployment.objects.create(
        name="new",
        model=deployment().model,
        engine="simulator",
        served_model_name="new",
        max_model_len=8192,
        kv_space_gib=1,
        plan={},
        state="stopped",
    )
    assert set(live_panel(new).reasons.values()) == {"the deployment has not been launched yet"}
    Deployment.objects.filter(pk=new.pk).update(state_reason="Stopped by admin.")
    new.refresh_from_db()
    assert set(live_panel(new).reasons.values()) == {"the deployment is stopped"}


def test_a_deployment_just_ready_waits_for_its_first_scrape_without_a_stale_banner(admin: Client) -> None:
    dep = deployment()
    now = time.time()
    Deployment.objects.filter(pk=dep.pk).update(state_since=datetime.fromtimestamp(now - INTERVAL, UTC))
    panel = live_panel(Deployment.objects.get(pk=dep.pk), now)
    assert panel.first_scrape_due and not panel.stale and panel.failing == []
    assert panel.reasons["kv_cache_usage"] == "its first scrape has not come yet (it has just become ready)"
    html = admin.get(f"/deployments/{dep.pk}/panel/").text
    assert 'data-field="stale"' not in html and "first scrape due" in html
    assert "first scrape due" in admin.get("/").text  # the dashboard's age column

    Deployment.objects.filter(pk=dep.pk).update(state_since=datetime.fromtimestamp(now - 4 * INTERVAL, UTC))
    late = live_panel(Deployment.objects.get(pk=dep.pk), now)  # three intervals and no scrape: stale, as before
    assert late.stale and not late.first_scrape_due and [r.name for r in late.failing] == ["llama-0"]
    assert "no replica's /metrics answered" in late.reasons["kv_cache_usage"]
    dashboard = admin.get("/").text  # nothing at all scraped lately: the scraper's silence, not the replica's
    assert "nothing scraped" in dashboard and "not answering" not in dashboard and "scraper_warning" in dashboard
    html = admin.get(f"/deployments/{dep.pk}/panel/").text
    assert "the scraper has tried no engine lately" in html and 'data-field="failing_replica"' not in html


def test_todays_usage_by_key_shows_while_the_deployment_is_not_ready(admin: Client) -> None:
    """The usage is the request log's: a trial found it hidden ("No goodput or usage") while the deployment loaded."""
    from console.access.models import ApiKey

    dep = deployment("reloading")
    Deployment.objects.filter(pk=dep.pk).update(state="loading")
    key = ApiKey.objects.create(name="ci runner", prefix="hk-cirunner", key_hash="x")
    log_row("reloading", api_key=key, prompt_tokens=30, completion_tokens=12)
    html = admin.get(f"/deployments/{dep.pk}/panel/").text
    assert "No goodput: the deployment is" in html and "ci runner" in html and ">42<" in html


def test_a_launch_is_no_scraper_silence_and_a_silent_scraper_is_not_blamed_on_the_engine(admin: Client) -> None:
    """The scraper reads ready engines only: a deployment ready for less than its first scrapes raises no banner (a
    trial saw one through every launch); once the scraper is silent, a missing number says so, not that the engine
    did not answer."""
    dep = deployment("fresh")
    assert 'data-field="scraper_warning"' not in admin.get("/").text  # ready just now, no scrape yet
    Deployment.objects.filter(pk=dep.pk).update(state_since=datetime.now(UTC) - timedelta(seconds=10 * INTERVAL))
    assert 'data-field="scraper_warning"' in admin.get("/").text
    html = admin.get(f"/deployments/{dep.pk}/panel/").text
    assert "nothing was scraped lately: the scraper is silent" in html and "/metrics answered" not in html
