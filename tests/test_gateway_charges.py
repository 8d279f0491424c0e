"""Keys without limits, charged in batches at an in-process price: gateway.prices (kept until Redis announces a
change, through gateway.registry's watch) and gateway.charges (the USD counters added to every FLUSH_EVERY
seconds and at a stop), against the real Redis. Through real gateways: tests/test_gateway_budgets.py."""

import asyncio
import logging
import time
from decimal import Decimal

import pytest
import redis.asyncio as aioredis
from django.conf import settings

from console.observability.cost import price_per_token
from gateway import prices as prices_module
from gateway.charges import FLUSH_EVERY, Charges, nano_usd
from gateway.prices import Prices
from gateway.quotas import Quota
from gateway.registry import Registry
from gateway.reservations import TTL, Reservations, counter_keys

pytestmark = pytest.mark.django_db(transaction=True)  # the registry's watch reads the database on its thread
DEPLOYMENT = 90_001  # no deployment of the suite has this id


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def _watched() -> tuple[Prices, Registry, aioredis.Redis]:
    """A price cache kept fresh by a live registry watch, and a Redis client; the deployment has no price."""
    prices = Prices()
    registry = Registry(prices)
    await registry.current()
    deadline = time.monotonic() + 5
    while not prices.live:
        assert time.monotonic() < deadline, "the registry's watch did not open"
        await asyncio.sleep(0.01)
    r = aioredis.Redis.from_url(settings.REDIS_URL)
    await r.delete(price_per_token(DEPLOYMENT))
    return prices, registry, r


async def _until(prices: Prices, r: aioredis.Redis, want: str) -> None:
    deadline = time.monotonic() + 5
    while (got := await prices.get(r, DEPLOYMENT)) != want:
        assert time.monotonic() < deadline, got
        await asyncio.sleep(0.01)


def test_a_price_is_kept_until_redis_announces_its_change() -> None:
    async def check() -> None:
        prices, registry, r = await _watched()
        try:
            assert await prices.get(r, DEPLOYMENT) == ""
            await r.set(price_per_token(DEPLOYMENT), "0.0001", ex=60)
            await _until(prices, r, "0.0001")  # the announcement dropped the kept "no price"
            assert DEPLOYMENT in prices._kept
            await r.set(price_per_token(DEPLOYMENT), "0.0002", ex=60)
            await _until(prices, r, "0.0002")
            await r.delete(price_per_token(DEPLOYMENT))  # the worker stopped publishing one: it expired
            await _until(prices, r, "")
        finally:
            await r.delete(price_per_token(DEPLOYMENT))
            await registry.close()
            await r.aclose()

    run(check())


def test_without_a_live_watch_every_read_asks_redis() -> None:
    async def check() -> None:
        prices, r = Prices(), aioredis.Redis.from_url(settings.REDIS_URL)
        try:
            await r.set(price_per_token(DEPLOYMENT), "0.0001", ex=60)
            assert await prices.get(r, DEPLOYMENT) == "0.0001"
            await r.set(price_per_token(DEPLOYMENT), "0.0003", ex=60)
            assert await prices.get(r, DEPLOYMENT) == "0.0003" and not prices._kept
        finally:
            await r.delete(price_per_token(DEPLOYMENT))
            await r.aclose()

    run(check())


def test_a_read_under_way_when_a_change_is_announced_is_not_kept() -> None:
    class AnnouncedMidRead:
        """Redis, with an announcement arriving while the GET is on its way back."""

        def __init__(self, r: aioredis.Redis, prices: Prices) -> None:
            self.r, self.prices = r, prices

        async def get(self, key: str) -> bytes | None:
            value = await self.r.get(key)
            self.prices.forget()
            return value

    async def check() -> None:
        prices, r = Prices(), aioredis.Redis.from_url(settings.REDIS_URL)
        prices.live = True
        try:
            assert await prices.get(AnnouncedMidRead(r, prices), DEPLOYMENT) == ""  # type: ignore[arg-type]
            assert not prices._kept
            assert await prices.get(r, DEPLOYMENT) == "" and DEPLOYMENT in prices._kept
        finally:
            await r.aclose()

    run(check())


def test_requests_ending_together_share_one_read_unless_a_change_was_announced_after_it_began() -> None:
    class Counted:
        """Redis, counting the GETs, each held until ``go`` is set."""

        def __init__(self, r: aioredis.Redis) -> None:
            self.r, self.gets, self.go = r, 0, asyncio.Event()

        async def get(self, key: str) -> bytes | None:
            self.gets += 1
            await self.go.wait()
            return await self.r.get(key)

    async def check() -> None:
        prices, r = Prices(), aioredis.Redis.from_url(settings.REDIS_URL)
        prices.live = True
        counted = Counted(r)
        try:
            await r.set(price_per_token(DEPLOYMENT), "0.0001", ex=60)
            asks = [asyncio.ensure_future(prices.get(counted, DEPLOYMENT)) for _ in range(20)]  # type: ignore[arg-type]
            await asyncio.sleep(0.05)
            prices.forget()  # announced while the read is on its way: a request from now on reads again
            later = asyncio.ensure_future(prices.get(counted, DEPLOYMENT))  # type: ignore[arg-type]
            asks[0].cancel()  # a client that left does not cancel the read the others wait for
            await asyncio.sleep(0.05)
            counted.go.set()
            assert await asyncio.gather(*asks[1:], later) == ["0.0001"] * 20
            assert counted.gets == 2 and not prices._reading
        finally:
            await r.delete(price_per_token(DEPLOYMENT))
            await r.aclose()

    run(check())


def test_a_kept_price_is_read_again_after_max_age(monkeypatch: pytest.MonkeyPatch) -> None:
    async def check() -> None:
        prices, r = Prices(), aioredis.Redis.from_url(settings.REDIS_URL)
        prices.live = True  # a watch that missed the change
        try:
            assert await prices.get(r, DEPLOYMENT) == ""
            await r.set(price_per_token(DEPLOYMENT), "0.0001", ex=60)
            assert await prices.get(r, DEPLOYMENT) == ""  # kept
            monkeypatch.setattr(prices_module, "MAX_AGE", 0.0)
            assert await prices.get(r, DEPLOYMENT) == "0.0001"
        finally:
            await r.delete(price_per_token(DEPLOYMENT))
            await r.aclose()

    run(check())


def test_charges_reach_the_counters_in_one_flush_and_a_stop_flushes_the_rest() -> None:
    key_id = owner_id = time.time_ns() % 1_000_000_000  # no key or user of the suite has this id
    counters = list(counter_keys(key_id, owner_id, DEPLOYMENT, time.time())[4:8])

    async def check() -> None:
        prices, r = Prices(), aioredis.Redis.from_url(settings.REDIS_URL)
        await r.set(price_per_token(DEPLOYMENT), "0.0001", ex=60)
        reservations = Reservations(prices)
        try:
            charged = [await reservations.settle(None, key_id, owner_id, DEPLOYMENT, used) for used in (10, 20, 0, 30)]
            assert charged == [Decimal("0.001"), Decimal("0.002"), None, Decimal("0.003")]
            assert [await r.get(c) for c in counters] == [None] * 4  # not yet: one flush for them all
            await asyncio.sleep(FLUSH_EVERY + 0.3)
            assert [int(await r.get(c) or 0) for c in counters] == [6_000_000] * 4  # nano-USD: $0.006
            assert 0 < await r.ttl(counters[0]) <= TTL["day"] and TTL["day"] < await r.ttl(counters[1]) <= TTL["month"]
            await r.expire(counters[0], 100)
            await reservations.settle(None, key_id, owner_id, DEPLOYMENT, 5)
        finally:
            await reservations.close()  # flushes the last charge at once
        try:
            assert int(await r.get(counters[0]) or 0) == 6_500_000
            assert await r.ttl(counters[0]) <= 100  # an existing counter keeps its TTL
        finally:
            await r.delete(price_per_token(DEPLOYMENT), *counters)
            await r.aclose()

    run(check())


def test_a_key_without_an_owner_charges_its_own_counters_only() -> None:
    key_id = time.time_ns() % 1_000_000_000
    names = counter_keys(key_id, None, DEPLOYMENT, time.time())

    async def check() -> None:
        r = aioredis.Redis.from_url(settings.REDIS_URL)
        await r.set(price_per_token(DEPLOYMENT), "0.0001", ex=60)
        reservations = Reservations(Prices())
        try:
            assert await reservations.settle(None, key_id, None, DEPLOYMENT, 10) == Decimal("0.001")
        finally:
            await reservations.close()
        try:
            assert [int(await r.get(c) or 0) for c in names[4:8]] == [1_000_000, 1_000_000, 0, 0]
        finally:
            await r.delete(price_per_token(DEPLOYMENT), *names[4:8])
            await r.aclose()

    run(check())


def test_a_flush_redis_does_not_take_is_logged_and_lost_from_the_counters_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def check() -> None:
        unreachable = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
        charges = Charges(unreachable)
        charges.charge(["hearth:test:nowhere:day"], [60], 5)
        with caplog.at_level(logging.WARNING, logger="gateway.charges"):
            await charges.close()  # no exception: the requests were answered long ago
        await unreachable.aclose()

    run(check())
    assert "1 USD counters of keys without limits not updated" in caplog.text


def test_the_charge_is_rounded_as_the_settlement_script_rounds_it() -> None:
    """The same tokens at the same price cost the same nano-USD whether charged here or settled in Lua."""
    cases = [(3, "0.00000083"), (1, "0.0000000005"), (7, "0.000000000049"), (123_457, "0.000000271828"), (10, "0.0001")]

    async def settled(used: int, price: str) -> int:
        reservations = Reservations(Prices())
        keys = [f"hearth:test:rounding:{i}" for i in range(8)]
        try:
            cost, _ = await reservations._settle(keys=keys, args=["", 0, used, 0, price, 0, 60, 60])
        finally:
            await reservations.redis.delete(*keys)
            await reservations.close()
        return int(cost)

    for used, price in cases:
        assert nano_usd(used, price) == asyncio.run(settled(used, price)), (used, price)


def test_a_price_with_its_own_output_rate_reserves_at_the_higher_and_charges_prompt_and_completion_apart() -> None:
    """console.observability.pricing publishes "input,output" when an admin sets them apart: admission reserves
    every token at the higher, settlement and the batch charge the prompt at the first and the rest at the second,
    rounded alike in Lua and here."""
    price = "0.0000005,0.0000015"  # $0.50 and $1.50 per million

    async def go() -> None:
        reservations = Reservations(Prices())
        r = reservations.redis
        key_id = 90_002
        keys = counter_keys(key_id, None, DEPLOYMENT, time.time())
        await r.set(price_per_token(DEPLOYMENT), price, ex=60)
        try:
            held = await reservations.admit(key_id, Quota(daily_usd=Decimal("1")), DEPLOYMENT, 1000)
            assert (held.cost, held.price) == (1_500_000, price)  # 1,000 tokens × $1.50 per million, in nano-USD
            charged = await reservations.settle(held, key_id, None, DEPLOYMENT, 400, prompt=300)
            assert charged == Decimal(300 * 500 + 100 * 1500) / 10**9 == Decimal(nano_usd(400, price, 300)) / 10**9
            assert int(await r.get(keys[4]) or 0) == 300_000  # the day's counter holds the charge, not the reserve
            for used, prompt in ((7, 3), (123_457, 100_000), (10, 0), (5, 5)):
                cost, _ = await reservations._settle(
                    keys=list(keys[1:]), args=["", 0, used, 0, price, 0, 60, 60, prompt]
                )
                assert int(cost) == nano_usd(used, price, prompt), (used, prompt)
        finally:
            await r.delete(*keys)
            await reservations.close()

    run(go())


def test_a_split_price_reserves_the_prompt_at_the_input_price() -> None:
    """A fresh user's trial: a daily budget refused "Hi" (31 prompt tokens) with 10 output tokens as costing up to
    41 tokens at the output price ($0.082 at $1,000 / $2,000 per million); the prompt costs the input price."""

    async def check() -> None:
        store, r = Reservations(Prices()), aioredis.Redis.from_url(settings.REDIS_URL)
        try:
            await r.set(price_per_token(DEPLOYMENT), "0.001,0.002", ex=60)
            held = await store.admit(90_002, Quota(daily_usd=Decimal("1")), DEPLOYMENT, 41, prompt=31)
            assert held.cost == nano_usd(41, "0.001,0.002", prompt=31) == 51_000_000  # $0.051, as it is charged
            await store.settle(held, 90_002, None, DEPLOYMENT, 41, prompt=31)
        finally:
            await r.delete(price_per_token(DEPLOYMENT))
            await r.aclose()
            await store.close()

    run(check())
