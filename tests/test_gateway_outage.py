"""Redis outages on the data path: a gateway on a redis-server this test starts on its own free port, stops and
starts again. A key whose limits live in Redis gets 503 in its API's shape with Retry-After; a key without
limits keeps being served (its cost just goes uncounted); both work again once Redis is back."""

import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from tests.conftest import start_web
from tests.gatewayworld import RedisServer
from tests.quotaworld import logged
from tests.simworld import Served

pytestmark = pytest.mark.django_db(transaction=True)
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def own_redis(live_env: dict[str, str], tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path, live_env)
    yield server
    server.stop()


def test_a_limited_key_gets_503_while_redis_is_down_and_an_unlimited_one_is_served(
    served: Served, own_redis: RedisServer, live_env: dict[str, str], tmp_path: Path
) -> None:
    limited = served.client.post("/api/keys", json={"name": "limited", "requests_per_minute": 1000}).json()
    free = served.client.post("/api/keys", json={"name": "free"}).json()
    proc, base = start_web({**live_env, "REDIS_URL": own_redis.url}, tmp_path / "gateway.log")
    try:
        sdk = {
            name: openai.OpenAI(base_url=f"{base}/v1", api_key=key["key"], max_retries=0)
            for name, key in (("limited", limited), ("free", free))
        }
        for one in sdk.values():
            assert one.chat.completions.create(model="llama", messages=HI, max_tokens=2).choices  # type: ignore[arg-type]

        own_redis.stop()
        with pytest.raises(openai.InternalServerError) as down:
            sdk["limited"].chat.completions.create(model="llama", messages=HI, max_tokens=2)  # type: ignore[arg-type]
        assert down.value.status_code == 503 and down.value.response.headers["retry-after"] == "5"
        assert down.value.body["code"] == "quota_store_unavailable"  # type: ignore[index]
        assert "kept in Redis, which does not answer" in down.value.body["message"]  # type: ignore[index]
        claude = anthropic.Anthropic(base_url=base, api_key=limited["key"], max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as anthropic_down:
            claude.messages.create(model="llama", max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
        assert anthropic_down.value.status_code == 503
        assert anthropic_down.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]

        assert sdk["free"].chat.completions.create(model="llama", messages=HI, max_tokens=2).choices  # type: ignore[arg-type]
        stream = sdk["free"].chat.completions.create(model="llama", messages=HI, max_tokens=5, stream=True)  # type: ignore[arg-type]
        assert [c.choices[0].finish_reason for c in stream if c.choices][-1] == "length"  # its settlement failed
        assert [r.cost_usd for r in logged([free["id"]], 3)] == [None] * 3

        own_redis.start()
        deadline = time.monotonic() + 5
        while True:
            try:
                sdk["limited"].chat.completions.create(model="llama", messages=HI, max_tokens=2)  # type: ignore[arg-type]
                break
            except openai.InternalServerError:
                assert time.monotonic() < deadline, "still 503 five seconds after Redis came back"
                time.sleep(0.2)
        statuses = [r.status for r in logged([limited["id"]], 4)]
        assert statuses[:3] == [200, 503, 503] and statuses[-1] == 200
    finally:
        proc.stop()
    assert "unexpected error" not in proc.output() and "Traceback" not in proc.output(), proc.output()[-3000:]
