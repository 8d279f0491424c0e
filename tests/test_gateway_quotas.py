"""Limits under concurrency: bursts of 50 requests at once, split over two real gateway processes sharing one
Redis, against each of a key's requests per minute, tokens per minute, tokens per day and requests at once.
What is served never exceeds the limit and comes within one request of it; refused requests count toward
nothing; Retry-After says when the window turns. Budgets: tests/test_gateway_budgets.py; Redis outages:
tests/test_gateway_outage.py."""

import asyncio
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import redis
from django.conf import settings

from console.observability.models import RequestLog
from gateway.reservations import counter_keys
from tests.conftest import Proc, free_port
from tests.simworld import Served

pytestmark = pytest.mark.django_db(transaction=True)
BURST = 50
HI = [{"role": "user", "content": "Hi"}]


def start_gateway(env: dict[str, str], log: Path) -> tuple[Proc, str]:
    """A uvicorn process serving the appliance (its gateway on /v1), once it answers; (process, base URL)."""
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "appliance.asgi:application", "--host", "127.0.0.1", "--port",
            str(port), "--no-access-log"]  # fmt: skip
    proc, base = Proc(argv, env, log), f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(base + "/v1/models", timeout=1)
            return proc, base
        except httpx.TransportError:
            assert proc.proc.poll() is None and time.monotonic() < deadline, proc.output()
            time.sleep(0.2)


@pytest.fixture(scope="module")
def gateways(live_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two gateway processes on the session's database and Redis. They share this test process's
    HEARTH_INSTANCE, so the test names their counters and sets the prices they read (the session's
    worker publishes its measured prices under its own instance, which these never read)."""
    env = {**live_env, "HEARTH_INSTANCE": settings.HEARTH_INSTANCE}
    folder = tmp_path_factory.mktemp("gateways")
    procs = [start_gateway(env, folder / f"gateway-{i}.log") for i in range(2)]
    yield [base for _, base in procs]
    for proc, _ in procs:
        assert "unexpected error" not in proc.output(), proc.output()[-3000:]
        proc.stop()


@dataclass
class Answer:
    status: int
    retry_after: str | None
    error: dict[str, Any]
    tokens: int


def make_key(served: Served, bases: list[str], **limits: Any) -> tuple[int, str]:
    """A key with ``limits``, once every gateway knows it (GET /v1/models counts toward no limit)."""
    made = served.client.post("/api/keys", json={"name": "burst", **limits}).json()
    deadline = time.monotonic() + 10
    for base in bases:
        while httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {made['key']}"}).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    return made["id"], made["key"]


async def _ask(sdk: openai.AsyncOpenAI, content: str, max_tokens: int) -> Answer:
    try:
        raw = await sdk.chat.completions.with_raw_response.create(
            model="llama", messages=[{"role": "user", "content": content}], max_tokens=max_tokens,
            extra_body={"ignore_eos": True},
        )  # fmt: skip
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        return Answer(exc.status_code, exc.response.headers.get("retry-after"), body, 0)
    usage = raw.parse().usage
    assert usage is not None
    return Answer(raw.status_code, None, {}, usage.total_tokens)


def burst(bases: list[str], key: str, content: str = "Hi", max_tokens: int = 10, n: int = BURST) -> list[Answer]:
    """``n`` chat requests at once, alternating between the gateways (the real openai SDK, no retries); each
    generates exactly ``max_tokens`` (vLLM's ``ignore_eos``, which the simulator honours)."""

    async def run() -> list[Answer]:
        sdks = [openai.AsyncOpenAI(base_url=f"{b}/v1", api_key=key, max_retries=0, timeout=60) for b in bases]
        try:
            return await asyncio.gather(*(_ask(sdks[i % len(sdks)], content, max_tokens) for i in range(n)))
        finally:
            for sdk in sdks:
                await sdk.close()

    return asyncio.run(run())


def room_in_minute(seconds: float) -> None:
    """Wait for the next minute when fewer than ``seconds`` are left of this one (the windows are UTC minutes)."""
    left = 60 - time.time() % 60
    if left < seconds:
        time.sleep(left + 0.1)


def logged(key_id: int, count: int) -> list[RequestLog]:
    """The key's request log rows once there are ``count`` (they are written in batches after the answer)."""
    deadline = time.monotonic() + 15
    while len(rows := list(RequestLog.objects.filter(api_key_id=key_id).order_by("id"))) < count:
        assert time.monotonic() < deadline, f"{len(rows)} of {count} rows"
        time.sleep(0.1)
    return rows


def counters(key_id: int, dep_id: int, at: float) -> dict[str, int]:
    """The key's counters in Redis for the windows holding ``at``: rpm, tpm, tpd, running."""
    r = redis.Redis.from_url(settings.REDIS_URL)
    rpm, tpm, tpd, running = counter_keys(key_id, None, dep_id, at)[:4]
    return {"rpm": int(r.get(rpm) or 0), "tpm": int(r.get(tpm) or 0), "tpd": int(r.get(tpd) or 0),
            "running": int(r.zcard(running))}  # fmt: skip


def test_a_burst_on_requests_per_minute_serves_exactly_the_limit(served: Served, gateways: list[str]) -> None:
    key_id, key = make_key(served, gateways, requests_per_minute=20)
    room_in_minute(20)
    started = time.time()
    answers = burst(gateways, key)
    assert sorted(a.status for a in answers) == [200] * 20 + [429] * 30
    refused = [a for a in answers if a.status == 429]
    assert {a.error["code"] for a in refused} == {"rate_limit_exceeded"}
    assert all("limit of 20 requests per minute is reached" in a.error["message"] for a in refused)
    turn = 60 - started % 60
    assert all(a.retry_after and turn - 3 <= int(a.retry_after) <= turn + 1 for a in refused), refused[0]
    assert counters(key_id, served.dep_id, started)["rpm"] == 20  # the 30 refusals counted toward nothing
    assert [r.status for r in logged(key_id, 50)].count(429) == 30  # logged as errors all the same


def test_refusals_for_concurrency_do_not_eat_the_minutes_requests(served: Served, gateways: list[str]) -> None:
    """The issue's case: a key allowed 20 a minute and 2 at once, hit by one burst, still has 18 left."""
    key_id, key = make_key(served, gateways, requests_per_minute=20, max_concurrent=2)
    room_in_minute(30)
    started = time.time()
    answers = burst(gateways, key, content="Slow [[sim:stall-first=2]]")
    assert sorted(a.status for a in answers) == [200] * 2 + [429] * 48
    refused = [a for a in answers if a.status == 429]
    assert all("limit of 2 requests at once is reached" in a.error["message"] for a in refused)
    assert {a.retry_after for a in refused} == {"1"}
    sdk = openai.OpenAI(base_url=f"{gateways[0]}/v1", api_key=key, max_retries=0)
    served_after = 0
    with pytest.raises(openai.RateLimitError, match="20 requests per minute"):
        while True:
            sdk.chat.completions.create(model="llama", messages=HI, max_tokens=1)  # type: ignore[arg-type]
            served_after += 1
    assert served_after == 18
    now = counters(key_id, served.dep_id, started)
    assert (now["rpm"], now["running"]) == (20, 0)


def test_a_burst_on_requests_at_once_serves_exactly_the_limit(served: Served, gateways: list[str]) -> None:
    key_id, key = make_key(served, gateways, max_concurrent=5)
    answers = burst(gateways, key, content="Slow [[sim:stall-first=2]]")
    assert sorted(a.status for a in answers) == [200] * 5 + [429] * 45
    assert {a.retry_after for a in answers if a.status == 429} == {"1"}
    assert counters(key_id, served.dep_id, time.time())["running"] == 0  # every slot given back
    assert len(burst(gateways, key, n=5)) == 5 and all(a.status == 200 for a in burst(gateways, key, n=5))


def _one_request(answers: list[Answer]) -> int:
    sizes = {a.tokens for a in answers if a.status == 200}
    assert len(sizes) == 1, sizes  # the same prompt, exactly max_tokens out: every request is this many tokens
    return sizes.pop()


@pytest.mark.parametrize(("limit", "window"), [("tokens_per_minute", "tpm"), ("tokens_per_day", "tpd")])
def test_a_burst_on_tokens_serves_within_one_request_of_the_limit(
    served: Served, gateways: list[str], limit: str, window: str
) -> None:
    """The issue's case: 50 requests at once on a key limited to 200 tokens a minute (or 300 a day) were all
    admitted. Each reserves its prompt (the engine's /tokenize count) and max_tokens, so they cannot be."""
    cap = 200 if window == "tpm" else 300
    key_id, key = make_key(served, gateways, **{limit: cap})
    room_in_minute(20)
    started = time.time()
    answers = burst(gateways, key)
    size, ok = _one_request(answers), [a for a in answers if a.status == 200]
    assert len(ok) * size <= cap < (len(ok) + 1) * size, (len(ok), size)
    rows = logged(key_id, BURST)
    assert sum((r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in rows) == len(ok) * size
    assert counters(key_id, served.dep_id, started)[window] == len(ok) * size  # settled, refusals left out
    what = "tokens per minute" if window == "tpm" else "tokens per day"
    refused = [a for a in answers if a.status == 429]
    assert all(f"limit of {cap} {what}" in a.error["message"] for a in refused)
    turn = (60 if window == "tpm" else 86400) - started % (60 if window == "tpm" else 86400)
    assert all(a.retry_after and turn - 3 <= int(a.retry_after) <= turn + 1 for a in refused)


def test_a_request_bigger_than_the_limit_is_refused_without_retry_after(served: Served, gateways: list[str]) -> None:
    _, key = make_key(served, gateways, tokens_per_minute=200)
    sdk = openai.OpenAI(base_url=f"{gateways[0]}/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.RateLimitError, match="more than this API key's limit of 200 tokens per minute") as big:
        sdk.chat.completions.create(model="llama", messages=HI, max_tokens=500)  # type: ignore[arg-type]
    assert "retry-after" not in big.value.response.headers
    with pytest.raises(openai.RateLimitError, match="needs up to 8,192 tokens"):  # no max_tokens: the context left
        sdk.chat.completions.create(model="llama", messages=HI)  # type: ignore[arg-type]


def test_a_cancelled_stream_is_settled_with_what_was_counted(served: Served, gateways: list[str]) -> None:
    key_id, key = make_key(served, gateways, tokens_per_minute=5000)
    room_in_minute(20)
    started = time.time()
    sdk = openai.OpenAI(base_url=f"{gateways[0]}/v1", api_key=key, max_retries=0)
    stream = sdk.chat.completions.create(
        model="llama", messages=[{"role": "user", "content": "Go [[sim:stall-between=0.3]]"}], max_tokens=1000,
        stream=True, extra_body={"ignore_eos": True},
    )  # fmt: skip
    for i, _ in enumerate(stream):
        if i == 4:
            break
    stream.close()
    row = logged(key_id, 1)[0]
    assert row.client_cancelled and row.completion_tokens is not None and row.completion_tokens < 100
    spent = (row.prompt_tokens or 0) + row.completion_tokens
    assert counters(key_id, served.dep_id, started)["tpm"] == spent  # the other ~900 reserved tokens given back
