"""A gateway that could reach none of a ready deployment's replicas asks the worker to look at its engines now
(console.deployments.engine_checks; the check itself is console.deployments.watching.check_serving, which each
reconcile runs for all): once per deployment within ASK_EVERY seconds, however many requests are refused, and the
client's 503 goes out all the same when Redis is away. A trial saw the console say "ready: Serving." for 15 s after an
engine's kill while the gateway answered 503 "it is being checked"."""

import asyncio
import json

import pytest
import redis
from django.conf import settings

from appliance.celery_queues import UPKEEP_QUEUE
from appliance.redis_keys import redis_key
from console.deployments import dispatch, engine_checks
from gateway.errors import GatewayError
from gateway.upstream import Engines
from tests.test_gateway_exchange import Client, exchange, route, run
from tests.test_gateway_upstream import Server, request

DEPLOYMENT = 424_242  # no such deployment: the task the worker may take does nothing


@pytest.fixture
def broker() -> redis.Redis:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(engine_checks.check_key(DEPLOYMENT))
    yield client
    client.delete(engine_checks.check_key(DEPLOYMENT))
    for message in asked(client):
        client.lrem(redis_key(UPKEEP_QUEUE), 0, message)
    client.close()


def asked(client: redis.Redis) -> list[bytes]:
    """The broker's messages asking a check of DEPLOYMENT."""
    messages = client.lrange(redis_key(UPKEEP_QUEUE), 0, -1)
    return [
        m
        for m in messages
        if (h := json.loads(m)["headers"])["task"] == dispatch.CHECK_SERVING and str(DEPLOYMENT) in h["argsrepr"]
    ]


def test_replicas_that_cannot_be_reached_ask_one_check_of_their_engines(broker: redis.Redis) -> None:
    async def closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)  # an engine dying with the request: closed without an answer

    async def refused_twice() -> None:
        async with Server(closes) as dying:
            for _ in range(2):
                relay = exchange(Engines(1, 5), route(dying.url, deployment_id=DEPLOYMENT))
                with pytest.raises(GatewayError) as caught:
                    await relay.run(Client())
                assert (caught.value.status, caught.value.code) == (503, "upstream_unreachable")
                assert "it is being checked" in caught.value.message

    run(refused_twice)
    assert len(asked(broker)) == 1  # two refused requests, one task
    assert 0 < broker.ttl(engine_checks.check_key(DEPLOYMENT)) <= engine_checks.ASK_EVERY


def test_the_503_goes_out_when_redis_is_away(broker: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens there

    async def closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)

    async def refused() -> None:
        async with Server(closes) as dying:
            relay = exchange(Engines(1, 5), route(dying.url, deployment_id=DEPLOYMENT))
            with pytest.raises(GatewayError) as caught:
                await relay.run(Client())
            assert caught.value.status == 503

    run(refused)
    assert asked(broker) == []
