"""USD budgets through two real gateway processes: a key's daily budget and a member's
monthly budget over all their keys, under bursts of 50 requests at once. Each request reserves what it could
cost at the deployment's price per token and is charged what it used; what is spent never passes the budget
and comes within one request of it, and the Redis counters equal the sum of the request log's costs.

The price is the one console.observability.cost publishes for the gateway (``price_per_token``), set here."""

import re
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import anthropic
import httpx
import openai
import pytest
import redis
from django.conf import settings

from console.deployments.models import Deployment
from console.observability import pricing
from console.observability.cost import price_per_token
from console.observability.models import PriceSetting, RequestLog
from gateway.app import POST_ROUTES
from gateway.charges import FLUSH_EVERY
from gateway.errors import Surface
from gateway.reservations import counter_keys
from tests.conftest import login
from tests.gatewayworld import gateway_processes
from tests.quotaworld import BURST, burst, counters, logged, make_key, one_request
from tests.simworld import Served
from tests.test_gateway_security import body_for

pytestmark = pytest.mark.django_db(transaction=True)
PRICE = Decimal("0.0001")  # USD per token: $100 per million, so a burst spends cents
NANO = Decimal(1_000_000_000)


@pytest.fixture(scope="module")
def gateways(live_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two gateway processes on the session's database and Redis, sharing their counters there."""
    with gateway_processes(2, live_env, tmp_path_factory.mktemp("gateways")) as bases:
        yield bases


def set_price(served: Served, price: Decimal | None) -> None:
    """The deployment's USD per token as an admin's price, published at once and by every scrape after (None: none,
    no GPU price left either, so the scrapes delete it)."""
    PriceSetting.objects.all().delete()
    per_million = None if price is None else price * 1_000_000
    pricing.set_price(Deployment.objects.get(pk=served.dep_id), per_million, per_million)
    published = redis.Redis.from_url(settings.REDIS_URL).get(price_per_token(served.dep_id))
    assert published == (None if price is None else str(price).encode())


def test_a_burst_on_a_keys_daily_budget_spends_within_one_request_of_it(
    served: Served, gateways: list[str], admin_user: Any
) -> None:
    set_price(served, PRICE)
    key_id, key = make_key(served.client, gateways, daily_budget_usd="0.05")
    started = time.time()
    answers = burst(gateways, [key])
    cost = one_request(answers) * PRICE
    ok, refused = [a for a in answers if a.status == 200], [a for a in answers if a.status == 429]
    assert len(ok) + len(refused) == BURST
    rows = logged([key_id], BURST)
    spent = sum(r.cost_usd for r in rows if r.cost_usd is not None)
    assert spent == len(ok) * cost and spent <= Decimal("0.05") < spent + cost
    assert {a.error["code"] for a in refused} == {"insufficient_quota"}
    said = re.compile(
        r"This key's daily budget of \$0\.05 (is spent|has \$[\d.]+ left, less than this request may cost)"
    )
    assert all(said.match(a.error["message"]) for a in refused), refused[0]  # less than one request's cost left
    midnight = 86400 - started % 86400
    assert all(a.retry_after and midnight - 5 <= int(a.retry_after) <= midnight + 1 for a in refused)
    if midnight > 61:  # hours away: the SDKs are told not to retry (OpenCode, cn and aider retried it for minutes)
        assert all(a.should_retry == "false" for a in refused), refused[0]
    held = counters(key_id, admin_user.pk, served, started)
    assert held["usd_day"] == held["usd_month"] == spent * NANO  # Redis's truth is the request log's sum

    claude = anthropic.Anthropic(base_url=gateways[1], api_key=key, max_retries=0)
    with pytest.raises(
        anthropic.RateLimitError, match=r"daily budget of \$0\.05 (is spent|has \$[\d.]+ left)"
    ) as spent_out:
        claude.messages.create(model="llama", max_tokens=10, messages=[{"role": "user", "content": "Hi"}])
    assert spent_out.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]


def test_a_members_monthly_budget_holds_over_all_their_keys(served: Served, gateways: list[str]) -> None:
    set_price(served, PRICE)
    mia = served.client.post("/api/members", json={"username": "mia", "password": "mia-password-1234"}).json()
    assert served.client.patch(f"/api/members/{mia['id']}", json={"monthly_budget_usd": "0.03"}).status_code == 200
    own = login(served.web, "mia", "mia-password-1234")
    (first, one), (second, two) = make_key(own, gateways), make_key(own, gateways)
    started = time.time()
    answers = burst(gateways, [one, two])
    cost = one_request(answers) * PRICE
    ok, refused = [a for a in answers if a.status == 200], [a for a in answers if a.status == 429]
    rows = logged([first, second], BURST)
    assert {r.api_key_id for r in rows if r.status == 200} == {first, second}
    spent = sum(r.cost_usd for r in rows if r.cost_usd is not None)
    assert spent == len(ok) * cost and spent <= Decimal("0.03") < spent + cost
    owners = re.compile(r"The monthly budget of this key's owner \(over all their keys\) of \$0\.03 (is spent|has \$)")
    assert all(owners.match(a.error["message"]) for a in refused), refused[0]
    held = counters(first, mia["id"], served, started)
    assert held["owner_month"] == held["owner_day"] == spent * NANO


def test_a_request_without_max_tokens_gets_what_the_budget_pays_for(served: Served, gateways: list[str]) -> None:
    """The context left (8,192 tokens, $0.82 at this price) is over the key's $0.05 a day: llm and aider send no
    max_tokens, and every such request was refused as costing more than all of the budget; now its output is
    limited to what the budget pays for after the prompt, and said so."""
    set_price(served, PRICE)
    key_id, key = make_key(served.client, gateways, daily_budget_usd="0.05")
    sdk = openai.OpenAI(base_url=f"{gateways[1]}/v1", api_key=key, max_retries=0)
    raw = sdk.chat.completions.with_raw_response.create(
        model="llama",
        messages=[{"role": "user", "content": "Hi"}],
        extra_body={"ignore_eos": True},
    )
    capped = raw.headers["x-hearth-max-tokens-capped"]
    limit = int(capped.split(";")[0])
    assert capped == f"{limit}; requested=none; cap=budget"
    answer = raw.parse()
    assert answer.usage and answer.usage.completion_tokens == limit and answer.choices[0].finish_reason == "length"
    assert 0 < limit < 500 - answer.usage.prompt_tokens + 1  # $0.05 pays for 500 tokens, the prompt's among them
    [row] = logged([key_id], 1)
    assert row.status == 200 and row.cost_usd is not None and row.cost_usd <= Decimal("0.05")

    # a key's max_tokens cap fills in the field the client left empty: what is left now still sets it (a trial's
    # capped key was refused for its whole cap once the budget could not pay for it, though it could pay for less)
    _, capped_key = make_key(served.client, gateways, daily_budget_usd="0.05", max_tokens_cap=450)
    sdk = openai.OpenAI(base_url=f"{gateways[0]}/v1", api_key=capped_key, max_retries=0)
    said = []
    for _ in range(6):  # until nothing is left: a 429 that says when it renews, never a 400 for a size nobody asked
        try:
            raw = sdk.chat.completions.with_raw_response.create(
                model="llama", messages=[{"role": "user", "content": "Hi"}], extra_body={"ignore_eos": True}
            )
        except openai.RateLimitError as refused:
            assert refused.code == "insufficient_quota" and "renews in" in refused.message
            break
        said.append(raw.headers["x-hearth-max-tokens-capped"])
    else:
        pytest.fail(f"never refused: {said}")
    assert said[0] == "450; requested=none; cap=key"  # $0.05 pays for the prompt and 450
    assert said[1].startswith("450; requested=none; cap=key, ") and said[1].endswith("; requested=450; cap=budget")


def test_without_a_published_price_a_budget_cannot_be_judged_and_nothing_is_charged(
    served: Served, gateways: list[str], admin_user: Any
) -> None:
    set_price(served, None)
    key_id, key = make_key(served.client, gateways, daily_budget_usd="0.01")
    answers = burst(gateways, [key], n=10)
    assert [a.status for a in answers] == [200] * 10
    assert [r.cost_usd for r in logged([key_id], 10)] == [None] * 10
    assert counters(key_id, admin_user.pk, served, time.time())["usd_day"] == 0


def test_a_key_without_limits_is_charged_too_so_a_budget_set_later_starts_from_the_truth(
    served: Served, gateways: list[str], admin_user: Any
) -> None:
    """Such a key's costs reach its counters in batches (gateway.charges), so they are waited for."""
    set_price(served, PRICE)
    key_id, key = make_key(served.client, gateways)
    answers = burst(gateways, [key], n=10)
    assert [a.status for a in answers] == [200] * 10
    spent = sum(r.cost_usd or 0 for r in logged([key_id], 10))
    assert spent == 10 * one_request(answers) * PRICE
    deadline = time.monotonic() + FLUSH_EVERY + 5
    while (held := counters(key_id, admin_user.pk, served, time.time()))["usd_day"] < spent * NANO:
        assert time.monotonic() < deadline, held
        time.sleep(0.05)
    assert held["usd_day"] == held["usd_month"] == spent * NANO


def test_a_spent_budget_is_refused_on_every_post_route_in_its_apis_shape(
    served: Served, gateways: list[str], admin_user: Any
) -> None:
    """The security suite's budget-exhausted case (tests/test_gateway_security.py), on a ready deployment."""
    set_price(served, PRICE)
    key_id, key = make_key(served.client, gateways, daily_budget_usd="0.01")
    # $0.01 spent: a request's row and the counter it left (nano-USD). With the counter alone, the worker's
    # accounting check mended it to the request log's $0 once (console.observability.charge_check), and the next
    # request was served.
    RequestLog.objects.create(
        api_key_id=key_id, model="llama", surface="openai", endpoint="/v1/chat/completions", status=200,
        duration_seconds=1.0, cost_usd=Decimal("0.01"),
    )  # fmt: skip
    day = counter_keys(key_id, admin_user.pk, served.dep_id, time.time())[4]
    redis.Redis.from_url(settings.REDIS_URL).set(day, 10_000_000, ex=3600)
    body = {
        "model": "llama",
        "messages": [{"role": "user", "content": "hi"}],
        "prompt": "hi",
        "input": "hi",
        "max_tokens": 5,
    }
    for path, (_, surface) in POST_ROUTES.items():
        answer = httpx.post(gateways[0] + path, headers={"Authorization": f"Bearer {key}"}, json=body_for(path, body))
        assert (answer.status_code, answer.headers["content-type"]) == (429, "application/json"), (path, answer.text)
        error = answer.json()["error"]
        assert "This key's daily budget of $0.01 is spent; it renews in" in error["message"], path
        assert int(answer.headers["retry-after"]) >= 1
        if surface == Surface.ANTHROPIC:
            assert answer.json()["type"] == "error" and error["type"] == "rate_limit_error", path
        else:
            assert (error["type"], error["code"]) == ("insufficient_quota", "insufficient_quota"), path
    assert {r.status for r in logged([key_id], len(POST_ROUTES) + 1)[1:]} == {429}
