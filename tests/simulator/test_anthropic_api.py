"""The Anthropic Messages dialect through the official anthropic SDK, and the raw event order."""

from typing import Any

import anthropic
import httpx
import pytest

from tests.simulator.simproc import MODEL, Sim, stream_events

WEATHER_TOOL: Any = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}
TEXT_ORDER = ["message_start", "content_block_start", "content_block_delta", "content_block_stop"]


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def collapse(names: list[str | None]) -> list[str | None]:
    """Event names with runs of the same name collapsed to one."""
    return [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]


def test_a_message_has_text_stop_reason_and_usage(sim: Sim) -> None:
    msg = sim.anthropic().messages.create(model=MODEL, max_tokens=5, messages=user("Say something."))
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert msg.content[0].type == "text" and msg.content[0].text
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 5
    natural = sim.anthropic().messages.create(model=MODEL, max_tokens=1000, messages=user("Say something."))
    assert natural.stop_reason == "end_turn" and natural.stop_sequence is None


def test_count_tokens_agrees_with_usage_and_system_blocks_count(sim: Sim) -> None:
    client = sim.anthropic()
    system: Any = [{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Answer in English."}]
    msg = client.messages.create(model=MODEL, max_tokens=3, system=system, messages=user("Hi"))
    counted = client.messages.count_tokens(model=MODEL, system=system, messages=user("Hi"))
    assert counted.input_tokens == msg.usage.input_tokens
    bare = client.messages.count_tokens(model=MODEL, messages=user("Hi"))
    as_string = client.messages.count_tokens(model=MODEL, system="You are terse.", messages=user("Hi"))
    assert bare.input_tokens < as_string.input_tokens < counted.input_tokens


def test_the_raw_stream_follows_the_documented_order(sim: Sim) -> None:
    body = {"model": MODEL, "max_tokens": 6, "stream": True, "messages": user("Stream please")}
    events = stream_events(sim, "/v1/messages", body)
    names = [name for name, _ in events]
    assert collapse(names) == [*TEXT_ORDER, "message_delta", "message_stop"]
    assert names.count("content_block_delta") == 6
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert start["role"] == "assistant" and start["content"] == [] and start["usage"]["input_tokens"] > 0
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    assert all(data["delta"]["type"] == "text_delta" for name, data in events if name == "content_block_delta")
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "max_tokens" and delta["usage"]["output_tokens"] == 6


def test_the_sdk_stream_helper_builds_the_same_message(sim: Sim) -> None:
    client = sim.anthropic()
    with client.messages.stream(model=MODEL, max_tokens=200, messages=user("Tell me a story.")) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    whole = client.messages.create(model=MODEL, max_tokens=200, messages=user("Tell me a story."))
    assert text == whole.content[0].text == final.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == whole.usage.output_tokens


def test_stop_sequences_end_with_stop_sequence(sim: Sim) -> None:
    client = sim.anthropic()
    text = client.messages.create(model=MODEL, max_tokens=8, messages=user("Words")).content[0].text  # type: ignore[union-attr]
    stop = text.split()[2]
    cut = client.messages.create(model=MODEL, max_tokens=8, messages=user("Words"), stop_sequences=[stop])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert cut.content[0].text == text[: text.index(stop)]  # type: ignore[union-attr]


def test_a_mentioned_tool_is_used(sim: Sim) -> None:
    msg = sim.anthropic().messages.create(
        model=MODEL, max_tokens=100, tools=[WEATHER_TOOL], messages=user("Use get_weather for Oslo")
    )
    assert msg.stop_reason == "tool_use"
    block = msg.content[0]
    assert block.type == "tool_use" and block.name == "get_weather" and block.id  # toolu_, or the engine's own id
    assert isinstance(block.input["city"], str) and isinstance(block.input["days"], int)  # type: ignore[index]


def test_a_streamed_tool_use_sends_input_json_deltas(sim: Sim) -> None:
    body = {"model": MODEL, "max_tokens": 100, "stream": True, "tools": [WEATHER_TOOL]}
    body["messages"] = user("Use get_weather for Oslo")
    events = stream_events(sim, "/v1/messages", body)
    assert collapse([n for n, _ in events]) == [*TEXT_ORDER, "message_delta", "message_stop"]
    block = events[1][1]["content_block"]
    assert block["type"] == "tool_use" and block["name"] == "get_weather" and block["input"] == {}
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert all(d["type"] == "input_json_delta" for d in deltas)
    assert '"city"' in "".join(d["partial_json"] for d in deltas)
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    with sim.anthropic().messages.stream(
        model=MODEL, max_tokens=100, tools=[WEATHER_TOOL], messages=user("Use get_weather for Oslo")
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "tool_use" and final.content[0].input["city"]  # type: ignore[index]


def test_a_tool_result_gets_a_text_answer(sim: Sim) -> None:
    messages: Any = [
        {"role": "user", "content": "Use get_weather for Oslo"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}]},
    ]
    msg = sim.anthropic().messages.create(model=MODEL, max_tokens=50, tools=[WEATHER_TOOL], messages=messages)
    assert msg.content[0].type == "text" and msg.stop_reason in ("end_turn", "max_tokens")


def test_keys_x_api_key_or_bearer_and_a_wrong_one_is_401(sim: Sim) -> None:
    bearer = anthropic.Anthropic(base_url=sim.base, auth_token=sim.key, max_retries=0)
    assert bearer.messages.create(model=MODEL, max_tokens=2, messages=user("Hi")).usage.output_tokens == 2
    with pytest.raises(anthropic.AuthenticationError):
        sim.anthropic(api_key="wrong").messages.create(model=MODEL, max_tokens=2, messages=user("Hi"))
    resp = httpx.post(sim.base + "/v1/messages/count_tokens", json={"model": MODEL, "messages": user("Hi")})
    assert resp.status_code == 401


def test_a_too_long_message_is_a_400(sim: Sim) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        sim.anthropic().messages.create(model=MODEL, max_tokens=100, messages=user("word " * 4090))
    said = str(caught.value)  # the engine's words, or the gateway's where it counted the prompt first (Anthropic's)
    assert "maximum context length is 4096 tokens" in said or "tokens > 4096 maximum" in said
