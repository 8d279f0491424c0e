"""The Costs page in headless Chromium: each deployment's price charged per million tokens and where it comes from,
a day's reconciliation (three keys' charges + idle GPU time = the day's GPU cost, to the cent) and the keys' costs;
the deployment page's cost card, the charged price apart from the cost at today's use. Screenshots go to the
test's folder (and HEARTH_SCREENSHOTS, when set)."""

import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from playwright.sync_api import Browser, expect

from console.access.models import ApiKey, Member
from console.observability.models import DeploymentPrice
from tests.chromium import browser  # noqa: F401 - the module's Chromium
from tests.test_browser_panels import keep, shot
from tests.test_money import charge
from tests.test_panels import Engine, deployment

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.usefixtures("seeded_gpu_prices")
def test_the_costs_page_shows_the_charged_price_and_a_reconciliation_that_adds_up(
    browser: Browser,  # noqa: F811 - the fixture
    web: str,
    admin_user: object,
    django_user_model: Any,
    tmp_path: Path,
) -> None:
    dep = deployment(name="money", gpus=2)  # $6.00 an hour
    DeploymentPrice.objects.create(deployment=dep, measured_tokens_per_second=1234.5, measured_run_id=3)
    engine = Engine(dep.replicas.get())
    # two hours of one UTC day, closed and within RAW_KEEP (24 h), written in one transaction: a session's Celery
    # worker (tests.conftest.worker, alive from an earlier test on this xdist worker) prunes raw samples older than
    # that (yesterday's 10:00-12:00, read at 10:55, had lost its first half hour: $9.00 of GPU time for $12.00) and
    # rolls up closed periods, which midway would have left the rest out
    end = int(time.time() // 300 * 300) - 300
    if datetime.fromtimestamp(end - 7200, UTC).date() != datetime.fromtimestamp(end - 1, UTC).date():
        end = int(datetime.fromtimestamp(end, UTC).replace(hour=0, minute=0, second=0).timestamp())  # to midnight
    start = end - 7200
    day = datetime.fromtimestamp(start, UTC).date()
    with transaction.atomic():  # up from start to end: a scrape every 3 s (the run's interval is 1 s; GPU time is
        for k in range(-1, 2400):  # the time between scrapes, a gap of more adding none), each step ending in the day
            engine.step(start + k * 3, 0, 0, running=0, kv=0.0)
    mia = django_user_model.objects.create_user("mia", "", "mia-password-1")
    Member.objects.create(user=mia, role="member", daily_budget_usd=Decimal("10"), monthly_budget_usd=Decimal("100"))
    budgets = {"owner": mia, "daily_budget_usd": Decimal("5"), "monthly_budget_usd": Decimal("50")}
    keys = [
        ApiKey.objects.create(name=f"team {n}", prefix=f"hk-brmon{n:03d}", key_hash="x", **(budgets if n == 2 else {}))
        for n in (1, 2, 3)
    ]
    for n, (key, prompt, completion) in enumerate(
        [(keys[0], 923_457, 98_765), (keys[1], 3_111_111, 333_333), (keys[2], 7, 5)]
    ):
        charge(dep, key, start + 600 + n * 60, prompt, completion)

    page = browser.new_context(base_url=web, viewport={"width": 1280, "height": 900}).new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin-password-1")
    page.get_by_role("button", name="Log in").click()
    page.goto(f"/costs/?day={day.isoformat()}")
    row = page.locator("tr[data-deployment=money]")
    expect(row.locator("[data-field=charged_per_million]")).to_have_text("$1.35")  # $6/h ÷ (1,234.5 tokens/s × 3600)
    expect(row.locator("[data-field=charged_source]")).to_contain_text("from capacity check 3")
    table = page.locator("table[data-table=reconciliation][data-deployment=money]")
    expect(table.locator("tr[data-row=key]")).to_have_count(3)
    cents = [
        Decimal(t.strip("$").replace(",", ""))
        for t in table.locator("[data-field=charged], [data-field=idle]").all_inner_texts()
    ]
    total = Decimal(table.locator("[data-field=gpu_cost]").inner_text().strip("$"))
    assert total == Decimal("12.00") and sum(cents) == total and len(cents) == 4
    for name, part in (("costs-prices", page.locator("table[data-table=deployment_prices]")), ("costs-day", table)):
        part.screenshot(path=str(tmp_path / f"{name}.png"))
        keep(tmp_path / f"{name}.png")
    shot(page, tmp_path, "costs")

    page.goto(f"/deployments/{dep.pk}/")
    expect(page.locator("#panel [data-field=charged_per_million]")).to_have_text("$1.35")
    page.locator("#panel .card").filter(has_text="Cost").screenshot(path=str(tmp_path / "deployment-cost.png"))
    keep(tmp_path / "deployment-cost.png")
    shot(page, tmp_path, "deployment-page")
    charge(dep, keys[1], time.time() - 5, 50_000, 10_000)  # today's, for the day's and month's windows
    for name, path in (
        ("key-budgets", f"/keys/{keys[1].pk}/"),
        ("member-budgets", f"/members/{mia.pk}/"),
        ("dashboard", "/"),
    ):
        page.goto(path)
        shot(page, tmp_path, name)
    page.goto(f"/keys/{keys[1].pk}/")
    expect(page.locator("[data-field=budget_month]")).to_have_text("of $50.00 a month")
    assert not errors, errors
