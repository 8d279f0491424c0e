"""Helpers of the limit and budget tests: keys every gateway knows, bursts of requests at once through the
real openai SDK, the request log's rows and the Redis counters of a key (gateway.reservations)."""

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import redis
from django.conf import settings

from console.observability.models import RequestLog
from gateway.reservations import counter_keys
from tests.simworld import Served

BURST = 50


@dataclass
class Answer:
    """One request's answer: its status, Retry-After, error body (empty when served), tokens and x-should-retry."""

    status: int
    retry_after: str | None
    error: dict[str, Any]
    tokens: int
    should_retry: str | None = None


def make_key(client: httpx.Client, bases: list[str], **limits: Any) -> tuple[int, str]:
    """A key made through /api with ``limits``, once every gateway knows it (GET /v1/models counts toward
    no limit); (id, secret)."""
    made = client.post("/api/keys", json={"name": "burst", **limits}).json()
    deadline = time.monotonic() + 10
    for base in bases:
        while httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {made['key']}"}).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    return made["id"], made["key"]


async def _ask(sdk: openai.AsyncOpenAI, content: str, max_tokens: int) -> Answer:
    try:
        raw = await sdk.chat.completions.with_raw_response.create(
            model="llama",
            messages=[{"role": "user", "content": content}],
            max_tokens=max_tokens,
            extra_body={"ignore_eos": True},
        )
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        headers = exc.response.headers
        return Answer(exc.status_code, headers.get("retry-after"), body, 0, headers.get("x-should-retry"))
    usage = raw.parse().usage
    assert usage is not None
    return Answer(raw.status_code, None, {}, usage.total_tokens)


def burst(bases: list[str], keys: list[str], content: str = "Hi", max_tokens: int = 10, n: int = BURST) -> list[Answer]:
    """``n`` chat requests at once, round-robin over the gateways and the keys (the real openai SDK, no
    retries); each generates exactly ``max_tokens`` (vLLM's ``ignore_eos``, which the simulator honours)."""

    async def run() -> list[Answer]:
        patient = 60.0  # seconds for each phase: the SDK's 5 s to connect once ran out for a burst on a loaded box
        sdks = [
            openai.AsyncOpenAI(base_url=f"{b}/v1", api_key=k, max_retries=0, timeout=patient)
            for b in bases
            for k in keys
        ]
        try:
            return await asyncio.gather(*(_ask(sdks[i % len(sdks)], content, max_tokens) for i in range(n)))
        finally:
            for sdk in sdks:
                await sdk.close()

    return asyncio.run(run())


def one_request(answers: list[Answer]) -> int:
    """The tokens of each served request, the same for all of them (the same prompt, exactly max_tokens)."""
    sizes = {a.tokens for a in answers if a.status == 200}
    assert len(sizes) == 1, sizes
    return sizes.pop()


def room_in_minute(seconds: float) -> None:
    """Wait for the next minute when fewer than ``seconds`` are left of this one (the windows are UTC minutes)."""
    left = 60 - time.time() % 60
    if left < seconds:
        time.sleep(left + 0.1)


def logged(key_ids: list[int], count: int) -> list[RequestLog]:
    """The keys' request log rows once there are ``count`` (they are written in batches after the answer)."""
    deadline = time.monotonic() + 60  # seconds: a bound for a box loaded by the rest of the suite, not a target
    while len(rows := list(RequestLog.objects.filter(api_key_id__in=key_ids).order_by("id"))) < count:
        assert time.monotonic() < deadline, f"{len(rows)} of {count} rows"
        time.sleep(0.1)
    return rows


def counters(key_id: int, owner_id: int | None, served: Served, at: float) -> dict[str, int]:
    """The key's counters in Redis for the windows holding ``at`` (Unix s): rpm, tpm, tpd, running, and USD
    (nano-USD) for the day and month, the key's and its owner's."""
    r = redis.Redis.from_url(settings.REDIS_URL)
    names = counter_keys(key_id, owner_id, served.dep_id, at)
    rpm, tpm, tpd, running, usd_day, usd_month, owner_day, owner_month = names[:8]
    count = {
        "rpm": rpm,
        "tpm": tpm,
        "tpd": tpd,
        "usd_day": usd_day,
        "usd_month": usd_month,
        "owner_day": owner_day,
        "owner_month": owner_month,
    }
    return {name: int(r.get(key) or 0) for name, key in count.items()} | {"running": int(r.zcard(running))}
