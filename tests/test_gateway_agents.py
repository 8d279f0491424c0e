"""What coding agents and their SDKs meet at the gateway, over real HTTP against the simulator (launched by the
real Celery task): keys in either header, the Responses API natively and translated, reasoning and cache
counts on translated routes, usage of cancelled streams, error codes and shapes, the agent counters."""

import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from console.observability.models import RequestLog
from tests.conftest import Workers, login
from tests.simworld import Served, deploy, hearth_metrics, wait_for_logs, wait_state

pytestmark = pytest.mark.django_db(transaction=True)
HI = [{"role": "user", "content": "Say something."}]
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture
def translated(served: Served) -> Iterator[Served]:
    """Beside ``served``: "thinker", an engine with only the chat API whose answers start with reasoning."""
    dep_id = deploy(
        served.web, served.client, "thinker", ["--no-anthropic", "--no-responses", "--reasoning-parser", "qwen3"]
    )
    assert wait_state(served.client, dep_id, {"ready", "failed"})["state"] == "ready"
    yield served
    served.client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(served.client, dep_id, {"stopped", "failed"})


CALLS = [
    ("GET", "/v1/models", None),
    ("POST", "/v1/chat/completions", {"model": "llama", "max_tokens": 2, "messages": HI}),
    ("POST", "/v1/messages", {"model": "llama", "max_tokens": 2, "messages": HI}),
    ("POST", "/v1/responses", {"model": "llama", "max_output_tokens": 2, "input": "Hi"}),
]


def test_a_hearth_key_in_either_header_authenticates_and_the_other_header_is_ignored(served: Served) -> None:
    other = "sk-ant-api03-some-other-providers-key"
    for method, path, body in CALLS:
        for headers in (
            {"x-api-key": served.key, "Authorization": f"Bearer {other}"},
            {"x-api-key": other, "Authorization": f"Bearer {served.key}"},
            {"x-api-key": served.key},
            {"Authorization": f"Bearer {served.key}"},
        ):
            resp = httpx.request(method, served.web + path, json=body, headers=headers, timeout=30)
            assert resp.status_code == 200, (path, list(headers), resp.text)
        refused = httpx.request(
            method,
            served.web + path,
            json=body,
            timeout=30,
            headers={"x-api-key": other, "Authorization": f"Bearer {other}"},
        )
        assert refused.status_code == 401 and refused.headers["content-type"] == "application/json"


def test_the_responses_api_works_natively_and_translated_with_the_sdk(translated: Served) -> None:
    sdk = translated.openai()
    for model in ("llama", "thinker"):
        whole = sdk.responses.create(model=model, input="Say something.", max_output_tokens=30)
        assert whole.output_text and whole.usage and whole.usage.input_tokens > 0, model
        with sdk.responses.stream(model=model, input="Say something.", max_output_tokens=30) as stream:
            events = list(stream)
        kinds, final = [event.type for event in events], events[-1].response  # type: ignore[union-attr]
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds[-1] == f"response.{final.status}" and final.status in ("completed", "incomplete"), model
        assert final.output_text and final.usage and final.usage.output_tokens > 0
        called = sdk.responses.create(model=model, input="Use get_weather for Oslo", tools=[WEATHER])
        call = next(o for o in called.output if o.type == "function_call")
        assert call.name == "get_weather" and "city" in json.loads(call.arguments), model
    thought = sdk.responses.create(model="thinker", input="Say something.", max_output_tokens=30)
    assert [o.type for o in thought.output] == ["reasoning", "message"]  # reasoning kept through the translation
    assert thought.usage and thought.usage.output_tokens_details.reasoning_tokens == 8


def test_translated_messages_carry_thinking_real_input_tokens_and_cache_reads(translated: Served) -> None:
    claude = anthropic.Anthropic(base_url=translated.web, api_key=translated.key, max_retries=0, timeout=60)
    system = "You are a careful assistant. " * 20
    claude.messages.create(model="thinker", max_tokens=40, system=system, messages=HI)  # fills the prefix cache
    message = claude.messages.create(model="thinker", max_tokens=40, system=system, messages=HI)
    assert [b.type for b in message.content][:2] == ["thinking", "text"]
    assert message.usage.cache_read_input_tokens and message.usage.input_tokens > 0
    body = {"model": "thinker", "max_tokens": 40, "stream": True, "system": system, "messages": HI}
    headers = {"x-api-key": translated.key}
    with httpx.stream("POST", f"{translated.web}/v1/messages", json=body, headers=headers, timeout=30) as resp:
        events = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: ")]
    start = next(e for e in events if e["type"] == "message_start")["message"]["usage"]
    final = next(e for e in events if e["type"] == "message_delta")["usage"]
    assert start["input_tokens"] > 0
    assert start["input_tokens"] == final["input_tokens"] + final["cache_read_input_tokens"]
    assert next(e["content_block"]["type"] for e in events if e["type"] == "content_block_start") == "thinking"
    with claude.messages.stream(model="thinker", max_tokens=40, messages=HI) as stream:
        assert stream.get_final_message().content[0].type == "thinking"


def test_a_system_message_inside_messages_is_served_on_every_route(translated: Served) -> None:
    """Claude Code 2.1.328 sends one on every request (engines/agent_requests/claude-code-2.1.328.json)."""
    claude = anthropic.Anthropic(base_url=translated.web, api_key=translated.key, max_retries=0, timeout=60)
    messages: Any = [
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": "Answer in English."},
        {"role": "user", "content": "Say something."},
    ]
    for model in ("llama", "thinker"):  # natively (vLLM's own /v1/messages takes it), and translated
        assert claude.messages.create(model=model, max_tokens=20, system="Be brief.", messages=messages).content
        assert claude.messages.count_tokens(model=model, messages=messages).input_tokens > 0


def cancel(served: Served, path: str, body: dict[str, Any], lines: int) -> None:
    with httpx.stream("POST", served.web + path, json=body, headers={"x-api-key": served.key}, timeout=30) as resp:
        events = resp.iter_lines()
        for _ in range(lines):
            next(events)


def test_a_client_that_cancels_a_stream_is_billed_for_what_it_was_sent_on_every_api(served: Served) -> None:
    long = {"model": "llama", "stream": True}
    cancel(served, "/v1/chat/completions", {**long, "max_tokens": 2000, "messages": HI}, 12)
    cancel(served, "/v1/completions", {**long, "max_tokens": 2000, "prompt": "Once upon"}, 12)
    cancel(served, "/v1/messages", {**long, "max_tokens": 2000, "messages": HI}, 24)
    cancel(served, "/v1/responses", {**long, "max_output_tokens": 2000, "input": "Hi"}, 24)
    rows = wait_for_logs(4)
    for row in rows:
        assert row.client_cancelled and row.usage_estimated, row.endpoint
        assert row.completion_tokens and row.completion_tokens >= 3 and row.prompt_tokens, row.endpoint


def test_a_client_that_leaves_before_any_of_its_answer_is_counted_its_prompt(served: Served) -> None:
    """A whole answer the client gave up on while the engine generated it, and a stream closed at its head while
    the engine ran the prefill of a long prompt: each engine had the prompt, so the row has its prompt tokens
    (counted by the engine's /tokenize) and is counted against the key's quotas, where both rows had none."""
    headers = {"x-api-key": served.key}
    whole = {"model": "llama", "max_tokens": 2000, "ignore_eos": True, "messages": HI}  # ~24 s of decode here
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{served.web}/v1/chat/completions", json=whole, headers=headers, timeout=1)
    long = [{"role": "user", "content": "Tell me about the sea. " * 600}]  # ~0.5 s of prefill at 5,000 tokens/s
    body = {"model": "llama", "stream": True, "max_tokens": 5, "messages": long}
    with httpx.stream("POST", f"{served.web}/v1/chat/completions", json=body, headers=headers, timeout=30) as resp:
        assert resp.status_code == 200  # its head; closed at once
    rows = wait_for_logs(2)
    assert [(r.stream, r.client_cancelled, r.usage_estimated) for r in rows] == [
        (False, True, True),
        (True, True, True),
    ]
    assert rows[0].prompt_tokens and rows[1].prompt_tokens and rows[1].prompt_tokens > 3000, rows


def test_engine_refusals_keep_their_code_and_the_body_is_checked_in_each_apis_shape(served: Served) -> None:
    sdk = served.openai()
    with pytest.raises(openai.BadRequestError) as chat:
        sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "[[sim:context-length]]"}])
    with pytest.raises(openai.BadRequestError) as completion:
        sdk.completions.create(model="llama", prompt="[[sim:context-length]]", max_tokens=5)
    with pytest.raises(openai.BadRequestError) as response:
        sdk.responses.create(model="llama", input="[[sim:context-length]]")
    for caught in (chat, completion, response):
        assert caught.value.code == "context_length_exceeded", caught.value.body
    nested = b'{"model": "llama", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for path, shape in (("/v1/chat/completions", "error"), ("/v1/messages", "type")):
        resp = httpx.post(served.web + path, content=nested, headers={"x-api-key": served.key}, timeout=30)
        assert resp.status_code == 400 and resp.headers["content-type"] == "application/json", resp.text
        assert shape in resp.json() and "nested too deeply" in resp.text


def test_max_completion_tokens_limits_a_completion_as_max_tokens_does(served: Served) -> None:
    resp = httpx.post(
        f"{served.web}/v1/completions",
        headers={"x-api-key": served.key},
        timeout=30,
        json={"model": "llama", "prompt": "Once upon a time", "max_completion_tokens": 40, "ignore_eos": True},
    )
    assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 40  # not OpenAI's default 16


def test_right_after_an_engine_dies_requests_get_503_with_retry_after(
    web: str, worker: Workers, admin_user: object
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "mortal")
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    key = client.post("/api/keys", json={"name": "mortal"}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.APIError):
        die = [{"role": "user", "content": "[[sim:die-mid-stream=2]]"}]
        list(sdk.chat.completions.create(model="mortal", stream=True, messages=die))  # type: ignore[arg-type]
    resp = httpx.post(
        f"{web}/v1/chat/completions",
        headers={"x-api-key": key},
        timeout=30,
        json={"model": "mortal", "max_tokens": 2, "messages": HI},
    )
    assert resp.status_code == 503 and int(resp.headers["retry-after"]) >= 1, resp.text
    deadline = time.monotonic() + 30
    while (
        httpx.post(
            f"{web}/v1/chat/completions",
            headers={"x-api-key": key},
            timeout=30,
            json={"model": "mortal", "max_tokens": 2, "messages": HI},
        ).status_code
        != 200
    ):
        assert time.monotonic() < deadline, "the engine was never restarted"
        time.sleep(0.5)
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped", "failed"})


def test_reasoning_and_length_cuts_are_counted_per_request_and_in_prometheus(translated: Served) -> None:
    sdk = translated.openai()
    sdk.chat.completions.create(model="thinker", messages=HI, max_tokens=4)  # type: ignore[arg-type]
    list(sdk.chat.completions.create(model="thinker", messages=HI, max_tokens=30, stream=True))  # type: ignore[arg-type]
    list(sdk.chat.completions.create(model="thinker", messages=HI, max_tokens=4, stream=True))  # type: ignore[arg-type]
    rows = wait_for_logs(3)
    cut, streamed, thinking = rows
    assert cut.length_cut and cut.reasoning_tokens == 4 and not cut.empty_answer  # all 4 went to thinking
    assert streamed.reasoning_tokens == 8 and not streamed.tool_call_failures
    # a stream cut while thinking has a TTFT: its first token was reasoning (its row read "—")
    assert thinking.reasoning_tokens == 4 and thinking.ttft_seconds is not None
    assert streamed.ttft_seconds is not None and thinking.ttft_seconds <= thinking.duration_seconds
    scrape = hearth_metrics(translated.web)
    assert 'hearth_gateway_reasoning_tokens_total{key_prefix="' + translated.key[:11] in scrape
    assert "hearth_gateway_length_cut_answers_total" in scrape
    assert RequestLog.objects.filter(reasoning_tokens__gt=0).count() == 3
