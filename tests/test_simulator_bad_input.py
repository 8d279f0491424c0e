"""Malformed requests get a 400 that names the bad part, in the route's error shape, never a 500 (which Hearth's
gateway passes on and counts as a service error); well-formed ones still get a 200. Runs the simulator's app
in-process (aiohttp's test server)."""

import asyncio
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from engines.simulator.config import parse_config
from engines.simulator.server import create_app

MODEL = "qwen3-0.6b"
LONE = '"\\ud800"'  # a lone surrogate, as JSON escapes it: raw JSON text, as a client would send it


def post(path: str, body: dict[str, Any] | str) -> tuple[int, Any]:
    """POST ``body`` (an object, or raw JSON text) to a fresh in-process simulator: (status, JSON answer)."""
    raw = body if isinstance(body, str) else json.dumps(body)

    async def go() -> tuple[int, Any]:
        async with TestClient(TestServer(create_app(parse_config(["--served-model-name", MODEL])))) as client:
            for _ in range(200):  # /health turns 200 once the (instant) load is done
                if (await client.get("/health")).status == 200:
                    break
                await asyncio.sleep(0.01)
            resp = await client.post(path, data=raw, headers={"Content-Type": "application/json"})
            return resp.status, await resp.json()

    return asyncio.run(go())


def chat(*messages: Any, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": list(messages), "max_tokens": 3, **extra}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


RAW_CHAT_LONE = f'{{"model": "{MODEL}", "messages": [{{"role": "user", "content": {LONE}}}]}}'
RAW_CHAT_LONE_KEY = f'{{"model": "{MODEL}", "messages": [{{"role": "user", "content": "hi", {LONE}: 1}}]}}'
RAW_PROMPT_LONE = f'{{"model": "{MODEL}", "prompt": {LONE}}}'
RAW_MESSAGES_LONE = f'{{"model": "{MODEL}", "max_tokens": 3, "messages": [{{"role": "user", "content": {LONE}}}]}}'


@pytest.mark.parametrize(
    ("path", "body", "where"),
    [
        ("/v1/chat/completions", chat(user(5)), "messages.0.content"),
        ("/v1/chat/completions", RAW_CHAT_LONE, "messages.0.content"),
        ("/v1/chat/completions", RAW_CHAT_LONE_KEY, "messages.0.\\ud800"),
        ("/v1/chat/completions", chat(user(None)), "messages.0.content"),  # as vLLM 0.32.0 refuses it
        ("/v1/chat/completions", chat({"content": "Hi"}), "messages.0.role"),
        ("/v1/chat/completions", chat({"role": 7, "content": "Hi"}), "messages.0.role"),
        ("/v1/chat/completions", chat(user([{"type": "bogus"}])), "messages.0.content.0.type"),
        ("/v1/chat/completions", chat(user([{"text": "Hi"}])), "messages.0.content.0.type"),
        ("/v1/chat/completions", chat(user([{"type": "text", "text": 5}])), "messages.0.content.0.text"),
        ("/v1/chat/completions", chat(user([7])), "messages.0.content.0"),
        ("/v1/chat/completions", chat(user("Hi"), tools="x"), "tools"),
        ("/v1/chat/completions", chat(user("Hi"), tools=["x"]), "tools.0"),
        ("/v1/chat/completions", chat(user("Hi"), stop={"a": 1}), "stop"),
        ("/v1/chat/completions", chat(user("Hi"), stop=["a", 1]), "stop.1"),
        ("/v1/chat/completions", chat(), "messages"),
        ("/v1/completions", {"model": MODEL, "prompt": 5}, "prompt"),
        ("/v1/completions", {"model": MODEL, "prompt": [1, "a"]}, "prompt"),
        ("/v1/completions", RAW_PROMPT_LONE, "prompt"),
        ("/v1/completions", {"model": MODEL, "prompt": "Hi", "stop": {"a": 1}}, "stop"),
        ("/v1/responses", {"model": MODEL, "input": [user(5)]}, "input.0.content"),
        ("/v1/responses", {"model": MODEL, "input": [user([{"type": "bogus"}])]}, "input.0.content.0.type"),
        ("/tokenize", {"model": MODEL, "messages": [user(5)]}, "messages.0.content"),
        ("/tokenize", {"model": MODEL, "messages": [user("Hi")], "tools": "x"}, "tools"),
    ],
)
def test_a_malformed_openai_request_gets_a_400_naming_the_part(
    path: str, body: dict[str, Any] | str, where: str
) -> None:
    status, answer = post(path, body)
    assert status == 400, answer
    error = answer["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == 400
    assert error["type"] in ("BadRequestError", "Bad Request")  # vLLM's own 400s; pydantic's ("1 validation error")
    assert where in error["message"] and where in error["param"]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (chat(user(5)), "messages.0.content"),
        (RAW_MESSAGES_LONE, "messages.0.content"),
        (chat({"content": "Hi"}), "messages.0.role"),
        (chat({"role": "wizard", "content": "Hi"}), "messages.0.role"),
        (chat({"role": "user"}), "messages.0.content"),
        (chat(user([{"type": "bogus"}])), "messages.0.content.0.type"),
        (chat(user([{"type": "text", "text": 5}])), "messages.0.content.0.text"),
        (chat(user("Hi"), system=5), "system"),
        (chat(user("Hi"), tools="x"), "tools"),
        (chat(user("Hi"), stop_sequences="x"), "stop_sequences"),
        (chat(user("Hi"), stop_sequences=["a", 1]), "stop_sequences.1"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_a_malformed_anthropic_request_gets_a_400_naming_the_part(
    path: str, body: dict[str, Any] | str, where: str
) -> None:
    status, answer = post(path, body)
    assert status == 400, answer
    assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
    assert where in answer["error"]["message"]


TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", chat(user("Hi"))),
        ("/v1/chat/completions", chat(user("smile \ud83d\ude00"))),  # a surrogate pair is one character: text
        ("/v1/chat/completions", chat(user([{"type": "text", "text": "What is this?"}, IMAGE]), stop=["\n", "."])),
        ("/v1/chat/completions", chat({"role": "wizard", "content": "Hi"})),  # vLLM allows custom roles
        (
            "/v1/chat/completions",
            chat(
                {"role": "developer", "content": "Be brief."},
                user("Weather in Oslo?"),
                {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
                tools=[WEATHER],
                stop="\n",
            ),
        ),
        ("/v1/completions", {"model": MODEL, "prompt": ["Hi", "there"], "stop": "x", "max_tokens": 3}),
        ("/v1/completions", {"model": MODEL, "prompt": [[1, 2, 3]], "max_tokens": 3}),
        ("/v1/responses", {"model": MODEL, "input": [user([{"type": "input_text", "text": "Hi"}])]}),
        ("/v1/messages", chat(user([{"type": "text", "text": "Hi"}]), system="Be brief.", stop_sequences=["x"])),
        # Claude Code 2.1.328's first request: its environment as a system message after the user's (vLLM takes it)
        ("/v1/messages", chat(user("Hi"), {"role": "system", "content": "# Environment\ncwd: /tmp"})),
        ("/tokenize", {"model": MODEL, "messages": [user("Hi")]}),
    ],
)
def test_a_well_formed_request_still_gets_a_200(path: str, body: dict[str, Any]) -> None:
    status, answer = post(path, body)
    assert status == 200, answer
