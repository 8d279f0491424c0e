"""Requests' ends sent in batches (gateway.finishes) against the real Redis: the ends of one turn in one call,
those that come while a call is on its way in the next, each end with its own answer, one end's error its own,
and a call that fails raised for every end of its batch. Each test has a Hearth instance of its own."""

import asyncio
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from django.conf import settings
from django.test import override_settings
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from console.observability.request_spool import spool_key
from gateway.finishes import Finishes, finish_call
from tests.ports import free_port

DEPLOYMENT = 90_003  # no deployment of the suite has this id


@pytest.fixture(autouse=True)
def own_instance() -> Iterator[redis.Redis]:
    with override_settings(HEARTH_INSTANCE=f"finishes-test-{secrets.token_hex(4)}"):
        yield redis.Redis.from_url(settings.REDIS_URL)


def end(notes: str, request_id: str, noted: bool = False) -> tuple[list[str], list[str | int]]:
    """The FINISH of an unlimited key's request ``request_id`` costing 7 nano-USD, its row a JSON object."""
    return finish_call(notes, request_id, noted, f'{{"request_id": "{request_id}"}}', "7", ([], []), DEPLOYMENT, 1.0)


class Counted:
    """The batch script, counting its calls' ends, each call held until ``go`` is set."""

    def __init__(self, finishes: Finishes) -> None:
        self.script, self.sizes, self.go = finishes._many, list[int](), asyncio.Event()
        self.go.set()
        finishes._many = self  # type: ignore[assignment]

    async def __call__(self, keys: list[str], args: list[Any]) -> Any:
        self.sizes.append(int(args[0]))
        await self.go.wait()
        return await self.script(keys=keys, args=args)


def spooled_ids(r: redis.Redis) -> list[str]:
    return [fields[b"row"].decode().split('"')[3] for _, fields in r.xrange(spool_key())]


def test_the_ends_of_one_turn_go_in_one_call_and_later_ones_in_the_next(own_instance: redis.Redis) -> None:
    async def check() -> None:
        client = aioredis.Redis.from_url(settings.REDIS_URL)
        finishes = Finishes(client)
        counted = Counted(finishes)
        try:
            first = [finishes.finish(*end("notes", f"r{i}")) for i in range(3)]
            answers = await asyncio.gather(*first)
            assert counted.sizes == [3] and answers == [[1, b"7"]] * 3
            counted.go.clear()  # the next call waits: what comes meanwhile goes in the call after it
            alone = asyncio.ensure_future(finishes.finish(*end("notes", "r3")))
            await asyncio.sleep(0.05)
            later = [asyncio.ensure_future(finishes.finish(*end("notes", f"r{i}"))) for i in range(4, 9)]
            await asyncio.sleep(0.05)
            assert counted.sizes == [3, 1]
            counted.go.set()
            assert await asyncio.gather(alone, *later) == [[1, b"7"]] * 6
            assert counted.sizes == [3, 1, 5]
            assert spooled_ids(own_instance) == [f"r{i}" for i in range(9)]  # in the order they ended
        finally:
            await client.aclose()

    asyncio.run(check())


def test_an_end_redis_refuses_raises_alone_and_the_others_of_its_batch_are_done(own_instance: redis.Redis) -> None:
    own_instance.set("not-a-hash", "x")

    async def check() -> None:
        client = aioredis.Redis.from_url(settings.REDIS_URL)
        finishes = Finishes(client)
        try:
            ends = [end("notes", "ok1"), end("not-a-hash", "refused", noted=True), end("notes", "ok2")]
            answers = await asyncio.gather(*(finishes.finish(*e) for e in ends), return_exceptions=True)
            assert answers[0] == answers[2] == [1, b"7"]
            assert isinstance(answers[1], ResponseError) and "WRONGTYPE" in str(answers[1])
            assert spooled_ids(own_instance) == ["ok1", "ok2"]
        finally:
            await client.aclose()

    asyncio.run(check())


def test_a_call_that_fails_is_raised_for_every_end_of_its_batch() -> None:
    async def check() -> None:
        client = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
        finishes = Finishes(client)
        try:
            answers = await asyncio.gather(
                *(finishes.finish(*end("notes", f"r{i}")) for i in range(3)), return_exceptions=True
            )
            assert [type(a) for a in answers] == [RedisConnectionError] * 3
        finally:
            await client.aclose()

    asyncio.run(check())
