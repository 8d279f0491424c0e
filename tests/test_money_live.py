"""Issue 31's acceptance through real processes: a simulator deployment behind the gateway, scraped by the worker,
idle, then busy, then idle again. The price charged per million tokens the worker publishes stays the same
throughout (from the plan's estimate: no capacity check has run); the cost per million tokens at today's use
moves (no tokens yet, then a figure); every request is charged its tokens × that price when it ends; and the key's
cost is one figure on Usage, Costs, the key's page, the deployment page and both CSVs."""

import csv
import io
import re
import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest
import redis
from django.conf import settings

from console.deployments.models import Deployment
from console.observability import cost
from console.observability.models import RequestLog
from console.observability.request_log import cost_text
from gateway.charges import nano_usd
from tests.simworld import Served

pytestmark = pytest.mark.django_db(transaction=True)
NANO = Decimal(10) ** 9
REQUESTS = 12


def price(served: Served) -> str:
    """The price per token the worker publishes for the deployment (waits for its first scrape)."""
    r = redis.Redis.from_url(settings.REDIS_URL)
    deadline = time.monotonic() + 60
    while (value := r.get(cost.price_per_token(served.dep_id))) is None:
        assert time.monotonic() < deadline, "the worker published no price"
        time.sleep(0.5)
    return value.decode()


def scrapes(n: int = 3) -> None:
    """Let the worker scrape (and publish) ``n`` more times."""
    time.sleep(n * settings.HEARTH_SCRAPE_INTERVAL + 0.5)


def cell(html: str, row_text: str, field: str) -> str:
    for row in re.findall(r"<tr[^>]*>.*?</tr>", html, re.S):
        if row_text in row and (found := re.search(rf'data-field="{field}"[^>]*>(\$[\d,.]+)<', row)):
            return found.group(1)
    raise AssertionError(f"no {field} in a row with {row_text}")


@pytest.mark.usefixtures("seeded_gpu_prices")
def test_idle_busy_idle_the_charged_price_holds_and_a_keys_cost_is_one_figure(served: Served) -> None:
    dep = Deployment.objects.get(pk=served.dep_id)
    idle = price(served)
    hourly = cost.hourly_cost(dep).usd_per_hour
    before = cost.use_costs(dep, datetime.now(UTC), hourly)[0]
    assert hourly is not None and before.tokens == 0 and before.usd_per_million is None  # at today's use: no tokens

    chat = served.openai()
    for n in range(REQUESTS):
        chat.chat.completions.create(
            model="llama", max_tokens=40, messages=[{"role": "user", "content": f"Count to {n + 5}."}]
        )
    deadline = time.monotonic() + 60
    while RequestLog.objects.filter(model="llama").count() < REQUESTS:
        assert time.monotonic() < deadline, "the request log did not get every request"
        time.sleep(0.3)
    busy = price(served)
    scrapes()
    after = price(served)
    assert idle == busy == after  # the traffic never moves the price charged
    charged = served.client.get(f"/api/deployments/{dep.pk}/metrics").json()
    assert charged["charged_from"] == "plan" and Decimal(charged["charged_usd_per_million_input"]) > 0

    rows = list(RequestLog.objects.filter(model="llama").select_related("api_key"))
    for row in rows:
        tokens = (row.prompt_tokens or 0) + (row.completion_tokens or 0)
        assert row.cost_usd == Decimal(nano_usd(tokens, idle)) / NANO, row.request_id
    key = rows[0].api_key
    assert key is not None and all(r.api_key_id == key.pk for r in rows)
    total = sum((r.cost_usd for r in rows if r.cost_usd is not None), Decimal(0))
    shown = cost_text(total)

    panel = served.client.get(f"/deployments/{dep.pk}/panel/").text
    now = cost.use_costs(dep, datetime.now(UTC), hourly)[0]
    assert now.tokens == sum((r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in rows)
    assert now.usd is not None and now.usd_per_million == now.usd / now.tokens * 1_000_000
    assert re.search(r'data-field="use_1">\$[\d.,]+<', panel), "the page shows it"
    assert cell(panel, key.name, "key_cost") == shown
    assert cell(served.client.get("/usage/?group=key").text, key.prefix, "cost_usd") == shown
    assert cell(served.client.get("/costs/").text, key.name, "key_cost") == shown
    page = served.client.get(f"/keys/{key.pk}/").text
    assert re.search(r'data-field="cost_today">([^<]+)<', page).group(1) == shown  # type: ignore[union-attr]
    usage_csv = csv.DictReader(io.StringIO(served.client.get("/usage/export.csv?group=key").text))
    assert [Decimal(r["cost_usd"]) for r in usage_csv if key.prefix in r["key"]] == [total]
    log_csv = csv.DictReader(io.StringIO(served.client.get("/requests/export.csv?model=llama").text))
    assert sum(Decimal(r["cost_usd"]) for r in log_csv) == total
