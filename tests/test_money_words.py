"""What a trial of money across the console and the JSON API found: a budget finer than a cent was rounded without a
word (0.0157 kept as 0.02); GET /api/keys gave today's cost as a 17-decimal string where GET /api/usage gives a
number, and a budget refusal with its countdown frozen ("renews in 2,130,935 s"); the member page called a key
refused for its budget, or expired, "active"; and a budget refusal told a client whose prompt alone cost more than
what was left to lower max_tokens, already 1. The refusal's words against the real Redis (gateway.reservations)."""

import asyncio
import json
import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import redis.asyncio as aioredis
from django.conf import settings
from django.test import Client
from django.utils import timezone

from console.access import keys
from console.access.models import ApiKey, Member
from console.observability.cost import price_per_token
from console.observability.models import RequestLog
from gateway.errors import GatewayError
from gateway.prices import Prices
from gateway.quotas import Quota
from gateway.reservations import Reservations, counter_keys

pytestmark = pytest.mark.django_db
JSON = "application/json"
SPENT = "This key's daily budget of $1.00 is spent; it renews in 2,130,935 s (at 2026-12-31 00:00 UTC)."


def logged(key: ApiKey, status: int, cost: str | None = None, error: str = "") -> None:
    RequestLog.objects.create(
        created_at=timezone.now(), api_key=key, model="smol", surface="openai", endpoint="/v1/chat/completions",
        status=status, duration_seconds=0.1, prompt_tokens=10, completion_tokens=5, cost_usd=cost, error=error,
    )  # fmt: skip


def test_a_budget_finer_than_a_cent_is_refused_not_rounded(admin: Client, member: Any) -> None:
    said = "monthly_budget_usd is kept to the cent: 0.0157 USD would be 0.02; give it with 2 decimals."
    made = admin.post("/api/keys", json.dumps({"name": "k", "monthly_budget_usd": "0.0157"}), content_type=JSON)
    assert (made.status_code, made.json()) == (400, {"detail": said}) and not ApiKey.objects.exists()
    made = admin.post("/api/keys", json.dumps({"name": "k", "monthly_budget_usd": 12.5}), content_type=JSON)
    assert made.status_code == 201  # 12.5 is to the cent
    finer = json.dumps({"monthly_budget_usd": 0.0157})
    patched = admin.patch(f"/api/keys/{made.json()['id']}", finer, content_type=JSON)
    assert (patched.status_code, patched.json()) == (400, {"detail": said})
    assert ApiKey.objects.get().monthly_budget_usd == Decimal("12.50")
    url = f"/api/members/{member.pk}"
    assert admin.patch(url, json.dumps({"monthly_budget_usd": "0.0157"}), content_type=JSON).json() == {"detail": said}
    assert Member.objects.get(user=member).monthly_budget_usd is None
    answer = admin.patch(url, json.dumps({"monthly_budget_usd": 3}), content_type=JSON).json()
    assert answer["limits"]["monthly_budget_usd"] == "3.00"  # as a key's budget is given: USD to the cent, a string
    listed = next(m for m in admin.get("/api/members").json() if m["id"] == member.pk)
    assert listed["limits"]["monthly_budget_usd"] == "3.00"


def test_a_keys_costs_are_numbers_and_its_budget_refusal_says_when_it_renews(admin: Client, admin_user: Any) -> None:
    key, _ = keys.create_key("ci", admin_user, daily_budget_usd=Decimal("1.00"))
    logged(key, 200, "0.00486")
    logged(key, 200, "0.00486")
    logged(key, 429, error=SPENT)
    [row] = admin.get("/api/keys").json()
    assert (row["cost_today"], row["cost_month"]) == (0.00972, 0.00972)  # as GET /api/usage's cost_usd
    assert row["daily_budget_usd"] == "1.00"
    assert row["budget_refusal"] == "This key's daily budget of $1.00 is spent; it renews 2026-12-31 00:00 UTC"
    assert admin.get("/api/usage").json()[0]["cost_usd"] == 0.00972


def test_the_member_page_says_a_keys_status_and_class_as_the_keys_pages_do(admin: Client, member: Any) -> None:
    refused, _ = keys.create_key("laptop", member)
    expired, _ = keys.create_key("old", member)
    ApiKey.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    logged(refused, 429, error=SPENT)
    page = admin.get(f"/members/{member.pk}/").content.decode()
    words = "This key&#x27;s daily budget of $1.00 is spent; it renews 2026-12-31 00:00 UTC"
    status = f'active<br><span class="warn" data-field="budget_refusal" title="{words}">refused for a budget</span>'
    assert status in page
    assert 'data-field="status">expired ' in page
    assert 'data-field="class">standard <small class="muted">(owner\'s default)</small>' in page


def test_a_budget_refusal_whose_prompt_and_one_output_token_cost_more_than_is_left_asks_for_a_shorter_prompt() -> None:
    deployment, key = 90_011, 90_012
    quota = Quota(daily_usd=Decimal("0.10"))

    async def refused(tokens: int, prompt: int) -> str:
        with pytest.raises(GatewayError) as caught:
            await store.admit(key, quota, deployment, tokens, prompt=prompt)
        assert caught.value.status == 429
        return caught.value.message

    async def check() -> None:
        await r.set(price_per_token(deployment), "0.001,0.002", ex=60)  # USD per token: input, output
        held = await store.admit(key, quota, deployment, 60, prompt=60)
        await store.settle(held, key, None, deployment, 60, prompt=60)  # $0.06 spent, $0.04 left
        long_prompt = await refused(51, prompt=50)  # its prompt alone $0.05
        assert "has $0.04 left, less than this request may cost (up to $0.052: its prompt with one output token may " \
            "cost $0.052); send a shorter prompt to pass now; it renews in " in long_prompt  # fmt: skip
        # a trial's: the prompt alone costs all that is left and max_tokens is already 1, so no lower limit passes
        all_left = await refused(41, prompt=40)
        assert "(up to $0.042: its prompt with one output token may cost $0.042); send a shorter prompt" in all_left
        many_tokens = await refused(31, prompt=10)  # $0.01 + 21 × $0.002
        assert "(up to $0.052: its prompt and output limit); ask for fewer output tokens (max_tokens) to pass now" \
            in many_tokens  # fmt: skip

    store, r = Reservations(Prices()), aioredis.Redis.from_url(settings.REDIS_URL)

    async def main() -> None:
        try:
            await check()
        finally:
            await r.delete(price_per_token(deployment), *counter_keys(key, None, deployment, time.time())[:8])
            await r.aclose()
            await store.close()

    asyncio.run(main())


def test_a_day_with_no_reconciliation_says_which_deployments_it_leaves_out(admin: Client) -> None:
    """A trial's CPU deployment had a token price and $0.33 charged; the page said no priced deployment was up."""
    page = admin.get("/costs/").content.decode()
    assert "one on CPU, or on GPUs with no $/hour, is left out (its keys' charges are in the table below)" in page


def test_the_members_api_gives_what_their_keys_were_charged_as_the_member_page_does(admin: Client, member: Any) -> None:
    """A trial found the member page's "Their keys were charged $X" nowhere in GET /api/members; then a member none
    of whose requests ran read null (no price) where GET /api/keys gives their keys 0."""

    def costs() -> tuple[float | None, float | None]:
        listed = next(m for m in admin.get("/api/members").json() if m["id"] == member.pk)
        return listed["cost_today"], listed["cost_month"]

    assert costs() == (0, 0)  # no request: charged nothing
    key, _ = keys.create_key("laptop", member)
    logged(key, 429, None)
    assert costs() == (0, 0)  # refused: charged nothing, as the key's own cost says
    assert [k["cost_today"] for k in admin.get("/api/keys").json() if k["id"] == key.pk] == [0]
    logged(key, 200, None)
    assert costs() == (None, None)  # one ran with no price: not known
    logged(key, 200, "0.00486")
    logged(key, 200, "0.00486")
    listed = next(m for m in admin.get("/api/members").json() if m["id"] == member.pk)
    assert (listed["cost_today"], listed["cost_month"]) == (0.00972, 0.00972)
    assert (
        'Their keys were charged <strong data-field="spent_today">$0.0097'
        in admin.get(f"/members/{member.pk}/").content.decode()
    )


def test_a_key_without_limits_of_its_own_shows_its_owners_budget_that_refuses_it_too(
    admin: Client, member: Any
) -> None:
    """A trial: alice's keys read "Limits: none" on the keys list while her member budget refused them."""
    free, _ = keys.create_key("free", member)
    Member.objects.filter(user=member).update(daily_budget_usd=Decimal("1.00"), monthly_budget_usd=Decimal("20"))
    said = "owner's $1.00/day $20.00/month</span>"
    for page in (admin.get("/keys/").content.decode(), admin.get(f"/keys/{free.pk}/").content.decode()):
        assert said in page
        assert 'class="limits">none<' not in page.replace("\n", "")
