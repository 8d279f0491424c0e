"""API key limits through the gateway: allowed models, max_tokens caps, expiry and quotas."""

import anthropic
import httpx
import openai
import pytest
import redis
from django.conf import settings

from console.observability.spent import key_counters
from tests.conftest import Workers, login, serving
from tests.quotaworld import room_in_minute
from tests.simworld import (
    Served,
    ensure_model,
    wait_for_logs,
    wait_state,
)
from tests.test_gateway_request_ids import rows

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_key_limited_to_other_models_gets_403_in_each_apis_shape(served: Served) -> None:
    serving("other")
    key = served.client.post("/api/keys", json={"name": "only-other", "allowed_models": ["other"]}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=key, max_retries=0)
    assert sdk.models.list().data == []
    with pytest.raises(openai.PermissionDeniedError, match=r"may not use the model 'llama'\. It may use: other\."):
        sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(openai.PermissionDeniedError, match=r"case-sensitive: did you mean 'other'\? It may use"):
        sdk.chat.completions.create(model="Other", messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(anthropic.PermissionDeniedError):
        anthropic.Anthropic(base_url=served.web, api_key=key, max_retries=0).messages.create(
            model="llama", max_tokens=5, messages=[{"role": "user", "content": "Hi"}]
        )


def test_a_keys_max_tokens_cap_lowers_what_a_request_asks_for(served: Served) -> None:
    key = served.client.post("/api/keys", json={"name": "capped", "max_tokens_cap": 3}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=key, max_retries=0)
    for asked in ({"max_tokens": 50}, {"max_completion_tokens": 50}, {}):
        reply = sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Talk"}], **asked)
        assert reply.usage and reply.usage.completion_tokens <= 3  # type: ignore[union-attr]
    claude = anthropic.Anthropic(base_url=served.web, api_key=key, max_retries=0)
    message = claude.messages.create(model="llama", max_tokens=50, messages=[{"role": "user", "content": "Talk"}])
    assert message.usage.output_tokens <= 3 and message.stop_reason == "max_tokens"
    # the answer says the cap lowered its limit, or set one; none within the cap
    for asked, header in (
        ({"max_tokens": 50}, "3; requested=50; cap=key"),
        ({}, "3; requested=none; cap=key"),
        ({"max_tokens": 2}, None),
    ):
        raw = sdk.chat.completions.with_raw_response.create(
            model="llama", messages=[{"role": "user", "content": "Talk"}], **asked
        )
        assert raw.headers.get("x-hearth-max-tokens-capped") == header


def test_an_expired_key_is_refused(served: Served) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from console.access.models import ApiKey
    from console.fanout import bump_routing_version

    resp = served.client.post("/api/keys", json={"name": "short", "expires_in_days": 1}).json()
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=resp["key"], max_retries=0)
    assert [m.id for m in sdk.models.list()] == ["llama"]
    ApiKey.objects.filter(pk=resp["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    bump_routing_version()
    with pytest.raises(openai.AuthenticationError):
        sdk.models.list()


def test_quotas_answer_429_with_retry_after_and_are_logged_as_errors(served: Served) -> None:
    rpm = served.client.post("/api/keys", json={"name": "rpm", "requests_per_minute": 2}).json()
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=rpm["key"], max_retries=0)
    room_in_minute(15)  # the three requests fall in one minute's window
    for _ in range(2):
        sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    with pytest.raises(openai.RateLimitError) as limited:
        sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert 1 <= int(limited.value.response.headers["retry-after"]) <= 60
    assert limited.value.body["code"] == "rate_limit_exceeded"  # type: ignore[index]
    with pytest.raises(anthropic.RateLimitError):
        anthropic.Anthropic(base_url=served.web, api_key=rpm["key"], max_retries=0).messages.create(
            model="llama", max_tokens=2, messages=[{"role": "user", "content": "Hi"}]
        )
    assert [log.status for log in wait_for_logs(4)] == [200, 200, 429, 429]

    tokens = served.client.post("/api/keys", json={"name": "tpm", "tokens_per_minute": 60}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=tokens, max_retries=0)
    room_in_minute(15)
    sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hello there"}], max_tokens=8)
    with pytest.raises(openai.RateLimitError, match=r"60 tokens per minute has 44 left, fewer than .* \(57:"):
        sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}], max_tokens=50)


def test_a_key_limited_to_one_request_at_once_is_refused_a_second(served: Served) -> None:
    key = served.client.post("/api/keys", json={"name": "one", "max_concurrent": 1}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=key, max_retries=0)
    slow = sdk.chat.completions.create(
        model="llama", max_tokens=3, stream=True, messages=[{"role": "user", "content": "Slow [[sim:stall-first=2]]"}]
    )
    with pytest.raises(openai.RateLimitError, match="limit of 1 request at once"):
        sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert list(slow)[-1].choices[0].finish_reason == "length"
    sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)  # freed


SLOW = "[[sim:stall-between=0.5]] Hi"  # a stream still open when its client leaves (engines.simulator.faults)


def test_a_key_limited_to_one_request_at_once_may_send_the_next_as_soon_as_an_answer_ends(served: Served) -> None:
    """The slot is free before the client sees its answer's end ([DONE], message_stop, response.completed, a
    whole body), or once it left: a tool that sends its next request at once is not refused (the slot used to be
    freed with the request's row, after the last bytes, and the openai SDK closes at [DONE]; after a client left,
    after the engine's /tokenize counted what it had been sent; CI once refused the next request with 429, and a relay
    that sees the client leave as the next request comes now waits for the slot: gateway.ledger.Ledger.admit,
    tests/test_gateway_left_slots.py)."""
    made = served.client.post("/api/keys", json={"name": "one", "max_concurrent": 1}).json()
    key, running = made["key"], f"{key_counters(made['id'])}:running"  # gateway.reservations.counter_keys
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=key, max_retries=0)
    claude = anthropic.Anthropic(base_url=served.web, api_key=key, max_retries=0)
    url, auth = f"{served.web}/v1/chat/completions", {"Authorization": f"Bearer {key}"}
    ask = {"model": "llama", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}
    slow = {**ask, "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": SLOW}]}
    counters = redis.Redis.from_url(settings.REDIS_URL)
    with httpx.Client(headers=auth) as reader, httpx.Client(headers=auth) as next_one:
        next_one.post(url, json=ask).raise_for_status()  # its connection open before the race
        for _ in range(30):  # the next request sent the moment [DONE] is read, before the stream's last bytes
            with reader.stream("POST", url, json={**ask, "stream": True}) as stream:
                for line in stream.iter_lines():
                    if line == "data: [DONE]":
                        assert counters.zcard(running) == 0
                        answer = next_one.post(url, json=ask)
                        assert answer.status_code == 200, answer.text
                        assert counters.zcard(running) == 0  # a whole answer's slot too
        for _ in range(10):  # a client that leaves mid-stream, and sends its next request at once
            with reader.stream("POST", url, json=slow) as stream:
                next(line for line in stream.iter_lines() if line.startswith("data: {"))
            answer = next_one.post(url, json=ask)
            assert answer.status_code == 200, answer.text
    for _ in range(10):  # each client's own way to read an answer to its end
        hi = "Hi"
        streamed = sdk.chat.completions.create(
            model="llama", max_tokens=2, stream=True, messages=[{"role": "user", "content": hi}]
        )
        assert [chunk.choices[0].finish_reason for chunk in streamed if chunk.choices][-1] == "length"
        sdk.chat.completions.create(model="llama", max_tokens=2, messages=[{"role": "user", "content": hi}])
        with claude.messages.stream(model="llama", max_tokens=2, messages=[{"role": "user", "content": hi}]) as events:
            assert events.get_final_message().stop_reason == "max_tokens"
        responses = sdk.responses.create(model="llama", max_output_tokens=2, input=hi, stream=True)
        assert [event.type for event in responses][-1] == "response.incomplete"  # cut at 2 tokens, as OpenAI says


def test_a_deployments_max_tokens_cap_applies_to_every_key(web: str, worker: Workers, admin_user: object) -> None:
    client = login(web)
    ensure_model()
    resp = client.post(
        "/api/deployments",
        json={"name": "capped", "model": "llama-8b", "engine": "simulator", "max_model_len": 8192, "max_tokens_cap": 2},
    )
    dep_id = resp.json()["id"]
    client.post(f"/api/deployments/{dep_id}/launch")
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    key = client.post("/api/keys", json={"name": "any"}).json()["key"]
    reply = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0).chat.completions.create(
        model="capped",
        messages=[{"role": "user", "content": "Talk a lot"}],
        max_tokens=100,
        extra_headers={"x-request-id": "capped-by-deployment"},
    )
    assert reply.usage and reply.usage.completion_tokens == 2
    [row] = rows(client_request_id="capped-by-deployment")  # the Requests page and its export say the cap did it
    assert (row.max_tokens_capped, row.max_tokens_capped_by, row.max_tokens_fitted) == (2, "deployment", None)
    page = client.get("/requests/").text
    assert "max_tokens capped to 2 tokens by the deployment&#x27;s max_tokens cap" in page, page[-3000:]
    export = client.get("/requests/export.csv").text.splitlines()
    assert export[0].endswith(
        ",max_tokens_fitted,max_tokens_capped,max_tokens_capped_by,wake_seconds,reasoning_tokens,tool_call_failures"
    )
    assert any(line.endswith(",,2,deployment,,,0") for line in export[1:]), export  # no reasoning, no failed call
    # a request refused at admission was sent nowhere: no cap is said of it (a trial's 429 row read "capped to 562")
    once = client.post("/api/keys", json={"name": "once", "requests_per_minute": 1}).json()["key"]
    statuses = [
        httpx.post(
            f"{web}/v1/chat/completions",
            headers={"Authorization": f"Bearer {once}", "x-request-id": f"capped-{n}"},
            json={"model": "capped", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 100},
            timeout=30,
        ).status_code
        for n in range(3)  # the minute turns at most once between them
    ]
    [refused] = rows(client_request_id=f"capped-{statuses.index(429)}")
    assert (refused.status, refused.max_tokens_capped, refused.max_tokens_capped_by) == (429, None, "")
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped"})
