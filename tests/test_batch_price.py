"""The batch price factor (issue 30): HEARTH_BATCH_PRICE_FACTOR is checked at the start (over 0, at most 1); a
batch-class request is charged its tokens × the deployment's price × the factor on every path, each to the same
nano-USD: the admission and settlement scripts, the unlimited keys' batched charges, and the charge-now of a request
whose gateway process died (against the real Redis); and through a real gateway and the simulator, a batch-class
key's requests are logged with class batch at that cost, a standard key's at the full price, the key's USD
counters equal its logged costs, and a Batch API line of a standard key is charged at the factor too."""

import asyncio
import csv
import io
import json
import math
import runpy
import time
from decimal import Decimal
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from console.access.models import ApiKey
from console.deployments.models import Deployment
from console.observability import pricing
from console.observability.cost import price_per_token
from console.observability.models import RequestLog
from gateway.charges import nano_usd
from gateway.prices import Prices, price_factor, scaled
from gateway.quotas import Quota
from gateway.reservations import Reservations, counter_keys, settlement
from tests.conftest import ROOT
from tests.quotaworld import burst, counters, logged, make_key
from tests.simworld import Served

NANO = Decimal(10) ** 9
PRICE = Decimal("0.0001")  # USD per token
DEPLOYMENT, KEY = 90_011, 90_012  # no deployment or key of the suite has these ids


@pytest.mark.parametrize("value", ["0", "-0.5", "1.5", "nan"])
def test_a_factor_out_of_range_stops_the_start_saying_so(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("HEARTH_BATCH_PRICE_FACTOR", value)
    with pytest.raises(ImproperlyConfigured, match=rf"HEARTH_BATCH_PRICE_FACTOR='{value}' must be a number over 0"):
        runpy.run_path(str(ROOT / "appliance" / "settings.py"))


def test_the_factor_applies_to_batch_only_and_defaults_to_a_half(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEARTH_BATCH_PRICE_FACTOR", "0.25")
    assert runpy.run_path(str(ROOT / "appliance" / "settings.py"))["HEARTH_BATCH_PRICE_FACTOR"] == 0.25
    assert settings.HEARTH_BATCH_PRICE_FACTOR == 0.5  # the test settings leave it at its default
    assert [price_factor(p) for p in ("batch", "standard", "interactive", "")] == [0.5, 1.0, 1.0, 1.0]
    assert scaled("", 0.5) == "" and scaled("0.0001", 1.0) == "0.0001"
    assert [float(p) for p in scaled("0.0001,0.0003", 0.5).split(",")] == [0.0001 * 0.5, 0.0003 * 0.5]


@pytest.mark.parametrize("price", ["0.0001", "0.0000013", "0.0001,0.0003"])
def test_every_charging_path_charges_a_batch_request_the_same_at_the_factor(price: str) -> None:
    """ADMIT (reserved at the scaled price), SETTLE (charged at it), the unlimited keys' charge, and a settlement
    that reads the price now ('?': the reaper's) agree to the nano-USD."""
    used, prompt, factor = 333, 120, price_factor("batch")
    want = nano_usd(used, scaled(price, factor), prompt)
    full = nano_usd(used, price, prompt)
    assert abs(want - full * factor) <= 1  # the factor, to the rounding of one nano-USD

    async def check() -> None:
        store, r = Reservations(Prices()), aioredis.Redis.from_url(settings.REDIS_URL)
        try:
            await r.set(price_per_token(DEPLOYMENT), price, ex=60)
            held = await store.admit(KEY, Quota(daily_usd=Decimal(100)), DEPLOYMENT, 1000, factor=factor)
            parts = [float(p) for p in scaled(price, factor).split(",")]
            assert [float(p) for p in held.price.split(",")] == parts  # the same doubles, written with 17 digits
            assert held.cost == math.ceil(1000 * max(parts) * 1e9)
            settled = await store.settle(held, KEY, None, DEPLOYMENT, used, prompt=prompt, factor=factor)
            charged = await store.charge(KEY, None, DEPLOYMENT, used, prompt=prompt, factor=factor)
            now = counter_keys(KEY, None, DEPLOYMENT, time.time())
            keys, args = settlement(now, "", 0, used, 0, "?", False, prompt, factor)
            read_now, _ = await store._settle(keys=keys, args=args)
            assert settled == charged == Decimal(want) / NANO and int(read_now) == want
            standard = await store.charge(KEY, None, DEPLOYMENT, used, prompt=prompt)
            assert standard == Decimal(full) / NANO
        finally:
            await r.delete(price_per_token(DEPLOYMENT), *counter_keys(KEY, None, DEPLOYMENT, time.time())[:8])
            await store.close()
            await r.aclose()

    asyncio.run(check())


def _set_price(served: Served) -> None:
    """The deployment's USD per token as an admin's price, published at once and by every scrape after (as
    tests/test_gateway_budgets.py)."""
    pricing.set_price(Deployment.objects.get(pk=served.dep_id), PRICE * 1_000_000, PRICE * 1_000_000)
    assert redis.Redis.from_url(settings.REDIS_URL).get(price_per_token(served.dep_id)) == str(PRICE).encode()


@pytest.mark.django_db(transaction=True)
def test_a_batch_keys_requests_are_logged_as_batch_and_charged_at_the_factor(served: Served, admin_user: Any) -> None:
    _set_price(served)
    factor = Decimal(repr(settings.HEARTH_BATCH_PRICE_FACTOR))
    batch_id, batch = make_key(served.client, [served.web], priority="batch")
    budget_id, budgeted = make_key(served.client, [served.web], priority="batch", daily_budget_usd="50")
    standard_id, standard = make_key(served.client, [served.web])
    started = time.time()
    for key in (batch, budgeted, standard):
        assert {a.status for a in burst([served.web], [key], n=3, max_tokens=12)} == {200}
    rows = logged([batch_id, budget_id, standard_id], 9)
    for row in rows:
        tokens = Decimal((row.prompt_tokens or 0) + (row.completion_tokens or 0))
        batch_class = row.api_key_id != standard_id
        assert row.priority == ("batch" if batch_class else "standard") and row.batch_id == ""
        assert row.cost_usd == tokens * PRICE * (factor if batch_class else 1), (row.priority, row.cost_usd)
    spent = sum((r.cost_usd or Decimal(0) for r in rows if r.api_key_id == budget_id), Decimal(0))
    held = counters(budget_id, admin_user.pk, served, started)
    assert spent > 0 and held["usd_day"] == spent * NANO  # what the budget counts is the logged, discounted cost

    table = csv.DictReader(io.StringIO(served.client.get("/usage/export.csv?group=key").text))
    want = {ApiKey.objects.get(pk=pk).prefix: c for pk, c in ((batch_id, "batch"), (budget_id, "batch"))}
    want[ApiKey.objects.get(pk=standard_id).prefix] = "standard"
    shown = {p: (r["class"], r["requests"]) for r in table for p in want if f"({p}…)" in r["key"]}
    assert shown == {p: (c, "3") for p, c in want.items()}


@pytest.mark.django_db(transaction=True)
def test_a_batch_api_line_of_a_standard_key_is_charged_at_the_factor(served: Served) -> None:
    """The Batch API runs each line at class batch whatever its key's class: its row says batch and its batch's
    id, at tokens × price × factor."""
    _set_price(served)
    factor = Decimal(repr(settings.HEARTH_BATCH_PRICE_FACTOR))
    client = served.openai()
    lines = [
        {
            "custom_id": f"line-{n}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "llama", "max_tokens": 6, "messages": [{"role": "user", "content": f"say {n}"}]},
        }
        for n in range(3)
    ]
    uploaded = client.files.create(file=("in.jsonl", "".join(json.dumps(x) + "\n" for x in lines)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    deadline = time.monotonic() + 120
    while (state := client.batches.retrieve(batch.id)).status not in {"completed", "failed", "expired", "cancelled"}:
        assert time.monotonic() < deadline, state
        time.sleep(0.5)
    assert state.status == "completed", state
    deadline = time.monotonic() + 30
    while len(rows := list(RequestLog.objects.filter(batch_id=batch.id))) < len(lines):
        assert time.monotonic() < deadline, f"{len(rows)} rows of the batch"
        time.sleep(0.3)
    assert ApiKey.objects.get(prefix=rows[0].key_prefix).effective_priority == "standard"
    for row in rows:
        tokens = Decimal((row.prompt_tokens or 0) + (row.completion_tokens or 0))
        assert row.priority == "batch" and row.cost_usd == tokens * PRICE * factor, row.cost_usd
