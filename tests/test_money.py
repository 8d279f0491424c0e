"""Money that holds still and adds up (issue 31, parts 1 and 2): the price charged per million tokens comes from
the deployment's capacity, not its traffic, so it stays the same idle, busy and idle again, while the cost per
million tokens at the use it had moves; a key's cost is one figure on Usage, Costs, its own page, the deployment
page and the CSVs; a day's reconciliation adds up to the cent.

The simulator's metrics registry is scraped through the scraper's own path at chosen moments (tests/test_panels'
Engine), and each request is charged as the gateway charges it: tokens × the USD per token published in Redis,
rounded to the nano-dollar (gateway.charges.nano_usd)."""

import csv
import io
import re
import socket
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import Client, override_settings

from console.access.models import ApiKey, Member
from console.deployments.models import Deployment, DeploymentState, DesiredState
from console.observability import cost, pricing, request_stats, scraping
from console.observability.models import DeploymentPrice, RequestLog
from console.observability.panel import live_panel
from console.observability.reconcile import reconcile
from console.observability.request_log import cost_text
from console.observability.templatetags import panel_format
from engines.capacity.results import LevelResult, Slo
from engines.planner import GpuPlan
from engines.stored_plan import StoredPlan
from gateway.charges import nano_usd
from gateway.prices import price_factor, scaled
from tests.test_panels import Engine, deployment

pytestmark = pytest.mark.django_db
NANO = Decimal(10) ** 9
SLO = Slo(ttft_seconds=2.0, itl_seconds=0.1)


def level(users: float, prompt_tps: float, output_tps: float, ttft_p90: float, failed: int = 0) -> LevelResult:
    return LevelResult(
        users, 100, 100 - failed, {}, 60.0, 0.5, ttft_p90, ttft_p90, 0.02, 0.03, 0.04, 0.02, 30.0,
        output_tps, prompt_tps, 1.5, 1.0, None, 200.0, 400.0,
    )  # fmt: skip


def measured(dep: Deployment) -> None:
    """A capacity check whose 8 users held the SLO at 500 + 1,000 tokens/s and whose 32 did not."""
    levels = [level(8, 500, 1000, 1.2), level(32, 1500, 3000, 3.5), level(64, 3000, 4000, 1.0, failed=3)]
    assert pricing.record_capacity(dep, levels, SLO, run_id=7) == 1500


def published(dep: Deployment) -> str:
    scraping._publish_prices([dep])
    value = redis.Redis.from_url(settings.REDIS_URL).get(cost.price_per_token(dep.pk))
    assert value is not None
    return value.decode()


def charge(
    dep: Deployment, key: ApiKey, at: float, prompt: int, completion: int, priority: str = "standard"
) -> RequestLog:
    """A request that ended at ``at``, charged as the gateway charges it at the price published now (times the
    batch price factor for a batch-class one)."""
    nano = nano_usd(prompt + completion, scaled(published(dep), price_factor(priority)))
    return RequestLog.objects.create(
        priority=priority,
        created_at=datetime.fromtimestamp(at, UTC),
        api_key=key,
        model=dep.served_model_name,
        surface="openai",
        endpoint="/v1/chat/completions",
        status=200,
        prompt_tokens=prompt,
        completion_tokens=completion,
        duration_seconds=1.0,
        cost_usd=Decimal(nano) / NANO,
    )


def amount(html: str, row_text: str, field: str) -> str:
    """The $ amount in ``data-field=field`` of the table row holding ``row_text``."""
    for row in re.findall(r"<tr[^>]*>.*?</tr>", html, re.S):
        if row_text in row and (found := re.search(rf'data-field="{field}"[^>]*>(\$[\d,.]+)<', row)):
            return found.group(1)
    raise AssertionError(f"no {field} in a row with {row_text}")


def test_the_charged_price_holds_still_idle_busy_and_idle_while_the_cost_at_use_moves(admin: Client) -> None:
    dep = deployment()  # one H100 at the seeded $3.00 per GPU-hour
    measured(dep)
    engine = Engine(dep.replicas.get())
    budgets = {"daily_budget_usd": Decimal("5.00"), "monthly_budget_usd": Decimal("50.00")}
    keys = [
        ApiKey.objects.create(name=f"key {n}", prefix=f"hk-money{n:03d}", key_hash="x", **(budgets if n == 1 else {}))
        for n in (1, 2)
    ]
    now = time.time()
    midnight = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    now = max(now, midnight + 3600)  # its half hour in one UTC day (at 00:13 the charges fell after the phases)
    start = (now - 1800) // 300 * 300  # three phases of 10 minutes, in whole 5-minute periods, ending before now
    prices, at_use, per_5_minutes = [], [], []
    for phase, busy in enumerate((False, True, False)):
        for step in range(200):  # a scrape every 3 s: the panels difference no wider gap
            at = start + phase * 600 + step * 3
            engine.step(at, 300 if busy else 0, 600 if busy else 0, running=8 if busy else 0, kv=0.3)
            if busy and step % 10 == 9:  # 9,000 tokens as a request of one of two keys (dated today, whatever the hour)
                charge(dep, keys[step // 10 % 2], max(at, midnight + 1), 3000, 6000)
        end = start + phase * 600 + 199 * 3
        prices.append(published(dep))
        at_use.append(
            cost.use_cost(
                dep, "so far", datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end + 1, UTC), Decimal(3)
            )
        )
        per_5_minutes.append(live_panel(dep, end).usd_per_million)

    # the price charged: $3.00/hour ÷ (1,500 tokens/s × 3600) × 10⁶ = $0.5556 per million, whatever the traffic
    assert prices == ["0.0000005556"] * 3
    assert pricing.charged_price(dep).source == "capacity"
    # at today's use: nothing served yet, then the GPU hours over the tokens, then dearer as idle hours add up;
    # up from the first scrape to the last of each phase's end (3 s apart, the first a baseline)
    assert at_use[0].usd_per_million is None and at_use[0].usd == Decimal(3) * 597 / 3600
    tokens = 20 * 9000
    assert at_use[1].tokens == at_use[2].tokens == tokens
    for use, seconds in ((at_use[1], 1197), (at_use[2], 1797)):
        assert use.usd == Decimal(3) * seconds / 3600
        assert use.usd_per_million == use.usd / tokens * 1_000_000
    assert at_use[1].usd_per_million < at_use[2].usd_per_million  # type: ignore[operator]
    # the panels' 5-minute view: idle, then $3/h at 300 tokens/s, then idle again
    assert per_5_minutes[0] is None and per_5_minutes[2] is None
    assert per_5_minutes[1] == pytest.approx(Decimal(3) / (300 * 3600) * 1_000_000, rel=1e-6)

    panel = admin.get(f"/deployments/{dep.pk}/panel/").text
    assert 'data-field="charged_per_million">$0.56<' in panel and "<small>/ M tokens charged</small>" in panel
    assert "from capacity check 7: 1,500 tokens/s held the SLO" in panel
    costs = admin.get("/costs/").text
    assert 'data-field="charged_per_million">$0.56<' in costs
    assert 'data-field="charged_per_million">$0.56<' in admin.get("/").text  # the dashboard's column
    usage = admin.get("/usage/?group=key").text
    usage_csv = list(csv.DictReader(io.StringIO(admin.get("/usage/export.csv?group=key").content.decode())))
    log_csv = list(csv.DictReader(io.StringIO(b"".join(admin.get("/requests/export.csv").streaming_content).decode())))  # type: ignore[attr-defined, arg-type]
    for key in keys:
        charged = sum((r.cost_usd for r in RequestLog.objects.filter(api_key=key)), Decimal(0))
        assert charged == 10 * nano_usd(9000, prices[0]) / NANO
        shown = cost_text(charged)
        assert amount(usage, key.prefix, "cost_usd") == shown
        assert amount(costs, key.name, "key_cost") == shown
        assert amount(panel, key.name, "key_cost") == shown
        page = admin.get(f"/keys/{key.pk}/").text
        assert re.search(r'data-field="cost_today">([^<]+)<', page).group(1) == shown  # type: ignore[union-attr]
        if key == keys[0]:  # the day's and the month's windows, each beside its budget
            assert (
                'data-field="budget_day">of $5.00 a day<' in page
                and 'data-field="budget_month">of $50.00 a month<' in page
            )
        [row] = [r for r in usage_csv if key.prefix in r["key"]]
        assert Decimal(row["cost_usd"]) == charged
        assert sum(Decimal(r["cost_usd"]) for r in log_csv if r["key_name"] == key.name) == charged


@override_settings(HEARTH_SCRAPE_INTERVAL=60)
def test_a_days_reconciliation_adds_up_to_the_cent_with_three_keys_a_batch_discount_and_idle_time(
    admin: Client,
) -> None:
    dep = deployment(gpus=2)  # $6.00 an hour
    DeploymentPrice.objects.create(deployment=dep, measured_tokens_per_second=1234.5, measured_run_id=3)
    engine = Engine(dep.replicas.get())
    day = datetime.now(UTC).date() - timedelta(days=1)
    ten = datetime(day.year, day.month, day.day, 10, tzinfo=UTC).timestamp()
    for minute in range(121):  # up from 10:00 to 12:00, scraped once a minute: $12.00 of GPU time
        engine.step(ten + minute * 60, 0, 0, running=0, kv=0.0)
    keys = [ApiKey.objects.create(name=f"team {n}", prefix=f"hk-recon{n:03d}", key_hash="x") for n in (1, 2, 3)]
    for n, (key, prompt, completion) in enumerate(
        [(keys[0], 123_457, 98_765), (keys[1], 1_111_111, 333_333), (keys[2], 7, 5), (keys[0], 55_555, 44_444)]
    ):
        charge(dep, key, ten + 600 + n * 60, prompt, completion)
    r = reconcile(dep, day)
    assert r is not None and r.gpu_usd == Decimal("12.00") and r.hours_up == 2.0
    assert [name for name, _ in r.keys] == ["team 1", "team 2", "team 3"]
    for key, (_, usd) in zip(keys, r.keys, strict=True):
        exact = sum((row.cost_usd for row in RequestLog.objects.filter(api_key=key)), Decimal(0))
        assert usd == exact.quantize(Decimal("0.01")) and usd.as_tuple().exponent == -2
    assert r.charged_usd + r.idle_usd == r.gpu_usd and r.idle_usd > 0
    assert r.idle_hours == pytest.approx(float(r.idle_usd) / 6)
    assert r.below_a_cent == {"team 3"}  # 12 tokens: charged, and $0.00 to the cent, which the page says
    page = admin.get(f"/costs/?day={day.isoformat()}").text
    under = r"team 3 <small[^>]*>\(charged\)</small></th><td [^>]*><span [^>]*>\$0\.00</span> <small[^>]*>\(under a"
    assert re.search(under, page)
    assert '<span data-field="hours_up">2.0 h</span> up' in page  # under an hour it says minutes (panel_format.hours)

    assert not r.batch_charged and 'data-row="batch_discount"' not in admin.get(f"/costs/?day={day.isoformat()}").text
    assert r.unpriced == 0
    for status, tokens in ((400, None), (429, None), (200, 30)):  # two refused, one that ran with no price then
        at = datetime.fromtimestamp(ten + 700, UTC)
        RequestLog.objects.create(
            created_at=at,
            api_key=keys[0],
            model=dep.served_model_name,
            surface="openai",
            endpoint="/v1/chat/completions",
            status=status,
            prompt_tokens=tokens,
            completion_tokens=tokens,
            duration_seconds=0.01,
        )
    unpriced = reconcile(dep, day)
    assert unpriced is not None and unpriced.unpriced == 1  # a refusal ran nothing: it is not "ran with no price"
    assert "1 request ran with no price and was charged nothing." in admin.get(f"/costs/?day={day.isoformat()}").text

    # a batch line's tokens took the GPU time their full price pays for: what it was let off is the batch
    # discount, not idle time; a discount under half a cent still has its row, at $0.00, as a key's charge does
    idle_before = r.idle_usd
    charge(dep, keys[1], ten + 800, 5, 5, priority="batch")
    r = reconcile(dep, day)
    assert r is not None and r.batch_charged and r.batch_discount_usd == 0
    page = admin.get(f"/costs/?day={day.isoformat()}").text
    assert 'data-field="batch_discount">$0.00</span> <small class="muted" data-field="batch_discount_below_a' in page
    batch = charge(dep, keys[1], ten + 900, 2_000_000, 500_000, priority="batch")
    r = reconcile(dep, day)
    assert r is not None and settings.HEARTH_BATCH_PRICE_FACTOR == 0.5
    assert batch.cost_usd is not None and r.batch_discount_usd == batch.cost_usd.quantize(Decimal("0.01"))
    assert r.charged_usd + r.batch_discount_usd + r.idle_usd == r.gpu_usd
    assert idle_before - r.idle_usd == pytest.approx(2 * batch.cost_usd, abs=Decimal("0.02"))

    html = admin.get(f"/costs/?day={day.isoformat()}").text
    table = re.search(rf'data-table="reconciliation" data-deployment="{dep.name}".*?</table>', html, re.S)
    assert table is not None and "batch requests charged 50 % of the price" in table.group(0)
    fields = r'data-field="(?:charged|batch_discount|idle)">\$([\d,.]+)<'
    shown = [Decimal(v.replace(",", "")) for v in re.findall(fields, table.group(0))]
    total = re.search(r'data-field="gpu_cost"><strong>\$([\d,.]+)<', table.group(0))
    assert len(shown) == 5 and total is not None and sum(shown) == Decimal(total.group(1)) == Decimal("12.00")


def test_a_deployment_on_a_gpu_plan_charges_the_plans_estimate_until_a_check_runs_and_then_the_checks() -> None:
    dep = deployment()
    sizing = GpuPlan(
        True, 1, [0], 0.9, 8192, 64, "auto", 16_000_000_000, 131_072, 400_000, 2048, 64.0, None
    )  # fmt: skip
    dep.plan = StoredPlan(sizing, "1× NVIDIA H100 80GB HBM3 (79.6 GiB each)", (0,), 1).to_json()
    dep.save()
    estimate = pricing.plan_tokens_per_second(dep)
    assert estimate == pytest.approx(64 * 3.35e12 / (16e9 + 64 * 2048 * 131_072))
    plan = pricing.charged_price(dep)
    assert plan.source == "plan" and "estimated from the plan" in plan.words and plan.input_per_million
    measured(dep)
    assert pricing.charged_price(dep).source == "capacity"
    pricing.set_price(dep, Decimal("0.50"), Decimal("1.50"))
    admin_price = pricing.charged_price(dep)
    assert (admin_price.source, admin_price.per_token) == ("admin", "0.0000005,0.0000015")
    pricing.set_price(dep, None, None)
    assert pricing.charged_price(dep).source == "capacity"


def test_an_admin_sets_a_deployments_price_on_the_costs_page_and_an_output_price_alone_is_refused(
    admin: Client,
) -> None:
    dep = deployment()
    bad = admin.post("/costs/", {"form": "deployment_price", "deployment": dep.pk, "output_usd": "2"})
    assert bad.status_code == 400 and "Give the input price too" in bad.text
    assert not DeploymentPrice.objects.exists()
    admin.post("/costs/", {"form": "deployment_price", "deployment": dep.pk, "input_usd": "0.8"})
    assert published(dep) == "0.0000008"
    assert "set by an admin" in admin.get("/costs/").text


def test_a_days_reconciliation_is_none_for_a_deployment_without_gpu_price_or_uptime() -> None:
    dep = deployment()
    assert reconcile(dep, date.today()) is None  # never scraped: not up


def test_a_members_day_and_month_spending_shows_beside_their_budgets(admin: Client, member: Any) -> None:
    dep = deployment()
    measured(dep)
    Member.objects.filter(user=member).update(daily_budget_usd=Decimal("2.00"), monthly_budget_usd=Decimal("30.00"))
    before = admin.get(f"/members/{member.pk}/").text  # no request priced yet: said so, not "$0.00" (a trial)
    assert 'data-field="spent_today">nothing (no priced request)<' in before and "$0.00" not in before
    keys = [
        ApiKey.objects.create(name=f"mia {n}", prefix=f"hk-miamia{n:02d}", key_hash="x", owner=member) for n in (1, 2)
    ]
    rows = [charge(dep, key, time.time() - 5, 40_000, 20_000) for key in keys]
    spent = cost_text(sum((r.cost_usd for r in rows), Decimal(0)))
    page = admin.get(f"/members/{member.pk}/").text
    assert f'data-field="spent_today">{spent}<' in page and "of $2.00 a day" in page
    assert f'data-field="spent_month">{spent}<' in page and "of $30.00 a month" in page
    own = Client()
    own.force_login(member)
    assert f"spent {spent} today, {spent} this month (UTC)" in own.get("/keys/").text


def test_a_charge_below_a_hundredth_of_a_cent_keeps_its_digits_on_every_page_that_shows_it(
    admin: Client, member: Any
) -> None:
    """The usage table, the costs and panel per-key tables, the key's and the member's pages: "$0.000012", not the
    "$0.0000" that reads as nothing charged (a small prompt on a cheap deployment costs so little)."""
    dep = deployment()
    measured(dep)
    key = ApiKey.objects.create(name="tiny", prefix="hk-tinytiny0", key_hash="x", owner=member)
    row = charge(dep, key, time.time() - 5, 10, 2)
    RequestLog.objects.filter(pk=row.pk).update(cost_usd=Decimal("0.0000123"))
    assert amount(admin.get("/usage/?group=key").text, key.prefix, "cost_usd") == "$0.000012"
    assert amount(admin.get("/costs/").text, key.name, "key_cost") == "$0.000012"
    assert amount(admin.get(f"/deployments/{dep.pk}/panel/").text, key.name, "key_cost") == "$0.000012"
    assert 'data-field="cost_today">$0.000012<' in admin.get(f"/keys/{key.pk}/").text
    assert 'data-field="spent_today">$0.000012<' in admin.get(f"/members/{member.pk}/").text


def test_the_costs_page_says_so_when_there_is_no_deployment_yet(admin: Client) -> None:
    assert '<td colspan="5" class="muted">No deployments yet.</td>' in admin.get("/costs/").text


def test_a_price_below_a_cent_keeps_two_significant_digits_on_the_panels() -> None:
    """A price of $0.00004 per token read "$0.0000" on the panels, which looks like free."""
    assert [panel_format.usd(v) for v in (None, "", 0, 0.00004, 0.0012, 0.05, 2.5, 1234.5)] == [
        "no price",
        "no price",
        "$0.00",
        "$0.000040",
        "$0.0012",
        "$0.05",
        "$2.50",
        "$1,234.50",
    ]


def test_a_deployment_asleep_or_stopped_to_save_keeps_its_price_for_the_requests_that_wake_it() -> None:
    """A request held for a wake is priced when admitted: with only ready deployments' prices kept, the price had
    lapsed while it slept, and the requests that woke it were charged nothing (past their key's budget too)."""
    dep = deployment()
    measured(dep)
    r = redis.Redis.from_url(settings.REDIS_URL)
    reachable = {
        (DeploymentState.ASLEEP, DesiredState.ASLEEP): True,
        (DeploymentState.WAKING, DesiredState.SERVING): True,
        (DeploymentState.STOPPED, DesiredState.STOPPED_IDLE): True,  # a request launches it again
        (DeploymentState.STOPPED, DesiredState.STOPPED): False,  # an admin stopped it: requests are refused
    }
    for (state, desired), priced in reachable.items():
        r.delete(cost.price_per_token(dep.pk))
        Deployment.objects.filter(pk=dep.pk).update(state=state, desired=desired)
        scraping.scrape_all()
        assert (r.get(cost.price_per_token(dep.pk)) is not None) is priced, (state, desired)


def test_the_price_of_a_deployment_no_request_can_reach_is_deleted_at_the_next_scrape() -> None:
    """Prices outlive a busy worker (an hour's TTL), so one that goes away is deleted, not left to lapse."""
    dep = deployment()
    measured(dep)
    r = redis.Redis.from_url(settings.REDIS_URL)
    scraping.scrape_all()
    assert r.get(cost.price_per_token(dep.pk)) is not None
    Deployment.objects.filter(pk=dep.pk).update(state=DeploymentState.FAILED, desired=DesiredState.SERVING)
    scraping.scrape_all()
    assert r.get(cost.price_per_token(dep.pk)) is None


def test_a_redis_that_does_not_answer_fails_the_scrape_in_its_timeouts_not_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scrape's Redis reads and writes (the request log's cursor, the prices) have timeouts: against a Redis
    that accepts and never answers each raises, and prices go through one client per process."""
    dep = deployment()
    measured(dep)
    silent = socket.create_server(("127.0.0.1", 0))
    monkeypatch.setattr(pricing, "REDIS_TIMEOUT", 0.3)
    monkeypatch.setattr(request_stats, "REDIS_TIMEOUT", 0.3)
    url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
    monkeypatch.setattr(settings, "REDIS_URL", url)
    try:
        began = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            pricing.publish_price(dep)
        with pytest.raises(redis.TimeoutError):
            scraping.scrape_all()
        assert time.monotonic() - began < 10
        assert pricing._client(url) is pricing._client(url)
    finally:
        pricing._client.cache_clear()
        silent.close()


def test_the_cost_at_use_names_no_period_longer_than_the_deployment_has_been_made() -> None:
    """A review saw "24 h $1,773.05 · 7 days $1,773.05 · 30 days $1,773.05" for a deployment 40 s old."""
    dep = deployment("young")
    now = datetime.now(UTC)
    assert [u.label for u in cost.use_costs(dep, now, Decimal(3))] == ["since made"]
    Deployment.objects.filter(pk=dep.pk).update(created_at=now - timedelta(days=3))
    dep.refresh_from_db()
    assert [u.label for u in cost.use_costs(dep, now, Decimal(3))] == ["last 24 h", "since made"]


def test_a_day_that_is_no_past_day_says_which_day_the_costs_page_shows(admin: Client) -> None:
    today = datetime.now(UTC).date().isoformat()
    assert (
        f"&#x27;2026-99-99&#x27; is not a past day (YYYY-MM-DD, from 0001-01-02); showing {today}."
        in admin.get("/costs/?day=2026-99-99").content.decode()
    )
    assert "is not a past day" not in admin.get(f"/costs/?day={today}").content.decode()
