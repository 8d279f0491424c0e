"""The OpenAI dialect through the official openai SDK, and the raw stream shapes vLLM sends."""

import json
from typing import Any

import httpx
import openai
import pytest

from tests.simulator.simproc import MODEL, Sim, auth, stream_events

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def test_models_lists_the_served_name_with_max_model_len(sim: Sim) -> None:
    models = sim.openai().models.list().data
    assert [m.id for m in models] == [MODEL]
    raw = httpx.get(sim.base + "/v1/models", headers=auth()).json()["data"][0]
    assert raw["object"] == "model" and raw["root"] == "models/sim-7b" and raw["max_model_len"] == 4096
    assert raw["owned_by"] and raw["created"] > 0


def test_a_chat_completion_has_text_and_usage(sim: Sim) -> None:
    resp = sim.openai().chat.completions.create(model=MODEL, messages=user("Say something."), max_tokens=5)
    assert resp.object == "chat.completion"
    choice = resp.choices[0]
    assert choice.finish_reason == "length" and choice.message.role == "assistant"
    assert choice.message.content and len(choice.message.content.split()) >= 3
    assert resp.usage is not None and resp.usage.completion_tokens == 5
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + 5
    tokenized = httpx.post(sim.base + "/tokenize", json={"messages": user("Say something.")}).json()
    assert tokenized["count"] == resp.usage.prompt_tokens == len(tokenized["tokens"])


def test_answers_are_deterministic_and_stop_on_their_own(sim: Sim) -> None:
    client = sim.openai()
    first = client.chat.completions.create(model=MODEL, messages=user("Tell me a story."))
    again = client.chat.completions.create(model=MODEL, messages=user("Tell me a story."))
    assert first.choices[0].message.content == again.choices[0].message.content
    assert first.choices[0].finish_reason == "stop"


def test_max_completion_tokens_wins_over_max_tokens(sim: Sim) -> None:
    resp = sim.openai().chat.completions.create(model=MODEL, messages=user("Hi"), max_tokens=9, max_completion_tokens=3)
    assert resp.usage is not None and resp.usage.completion_tokens == 3
    assert resp.choices[0].finish_reason == "length"


def test_a_stop_string_ends_the_answer(sim: Sim) -> None:
    client = sim.openai()
    text = client.chat.completions.create(model=MODEL, messages=user("Words"), max_tokens=8).choices[0].message.content
    assert text
    stop = text.split()[3]
    cut = client.chat.completions.create(model=MODEL, messages=user("Words"), max_tokens=8, stop=[stop]).choices[0]
    assert cut.finish_reason == "stop"
    assert cut.message.content == text[: text.index(stop)]


def test_the_chat_stream_has_vllm_chunk_order_and_a_usage_chunk(sim: Sim) -> None:
    body = {"model": MODEL, "messages": user("Stream please"), "max_tokens": 6, "stream": True}
    body["stream_options"] = {"include_usage": True}
    events = stream_events(sim, "/v1/chat/completions", body)
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == MODEL for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    first, *middle, finish, usage = chunks
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(middle) == 6
    for chunk in middle:
        assert list(chunk["choices"][0]["delta"]) == ["content"] and chunk["choices"][0]["finish_reason"] is None
    assert finish["choices"][0]["delta"] == {} and finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 6
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 6
    assert usage["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def test_the_sdk_reassembles_a_stream(sim: Sim) -> None:
    stream = sim.openai().chat.completions.create(
        model=MODEL, messages=user("Tell me a story."), stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    whole = sim.openai().chat.completions.create(model=MODEL, messages=user("Tell me a story."))
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]


def test_n_gives_indexed_choices_streamed_and_not(sim: Sim) -> None:
    resp = sim.openai().chat.completions.create(model=MODEL, messages=user("Two please"), n=2, max_tokens=4)
    assert [c.index for c in resp.choices] == [0, 1]
    assert resp.choices[0].message.content != resp.choices[1].message.content
    assert resp.usage is not None and resp.usage.completion_tokens == 8
    body = {"model": MODEL, "messages": user("Two please"), "n": 2, "max_tokens": 4, "stream": True}
    chunks = [data for _, data in stream_events(sim, "/v1/chat/completions", body)[:-1]]
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        assert mine[-1]["finish_reason"] == "length"
        assert "".join(c["delta"].get("content", "") for c in mine) == resp.choices[index].message.content


def test_a_mentioned_tool_is_called_with_schema_shaped_arguments(sim: Sim) -> None:
    resp = sim.openai().chat.completions.create(
        model=MODEL, messages=user("What does get_weather say for Lisbon?"), tools=[WEATHER_TOOL]
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("chatcmpl-tool-")
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert isinstance(args["city"], str) and isinstance(args["days"], int) and args["unit"] == "celsius"


def test_no_tool_call_when_no_tool_is_mentioned(sim: Sim) -> None:
    resp = sim.openai().chat.completions.create(model=MODEL, messages=user("Hello there"), tools=[WEATHER_TOOL])
    assert resp.choices[0].finish_reason == "stop" and not resp.choices[0].message.tool_calls


def test_a_streamed_tool_call_has_vllm_delta_shapes(sim: Sim) -> None:
    body = {"model": MODEL, "messages": user("call get_weather"), "tools": [WEATHER_TOOL], "stream": True}
    chunks = [data["choices"][0] for _, data in stream_events(sim, "/v1/chat/completions", body)[:-1]]
    assert chunks[0]["delta"] == {"role": "assistant", "content": ""}
    head = chunks[1]["delta"]["tool_calls"][0]
    assert head["index"] == 0 and head["type"] == "function" and head["id"].startswith("chatcmpl-tool-")
    assert head["function"] == {"name": "get_weather", "arguments": ""}
    pieces = [c["delta"]["tool_calls"][0] for c in chunks[2:-1]]
    assert all(p.keys() == {"index", "function"} and p["function"].keys() == {"arguments"} for p in pieces)
    assert json.loads("".join(p["function"]["arguments"] for p in pieces))["city"]
    assert chunks[-1]["delta"] == {} and chunks[-1]["finish_reason"] == "tool_calls"
    stream = sim.openai().chat.completions.create(
        model=MODEL, messages=user("call get_weather"), tools=[WEATHER_TOOL], stream=True
    )
    arguments = "".join(
        (c.choices[0].delta.tool_calls or [None])[0].function.arguments or ""  # type: ignore[union-attr]
        for c in stream
        if c.choices and c.choices[0].delta.tool_calls
    )
    assert json.loads(arguments)["city"]


def test_completions_stream_and_not(sim: Sim) -> None:
    client = sim.openai()
    resp = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5)
    assert resp.object == "text_completion" and resp.choices[0].finish_reason == "length"
    assert resp.usage is not None and resp.usage.completion_tokens == 5
    streamed = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == resp.choices[0].text


def test_embeddings_are_deterministic_unit_vectors(sim: Sim) -> None:
    client = sim.openai()
    resp = client.embeddings.create(model=MODEL, input=["a cat", "a dog", "a cat"])  # the SDK asks for base64
    vectors = [d.embedding for d in resp.data]
    assert len(vectors) == 3 and len(vectors[0]) == 384
    assert vectors[0] == vectors[2] and vectors[0] != vectors[1]
    assert sum(x * x for x in vectors[0]) == pytest.approx(1.0, rel=1e-4)
    floats = client.embeddings.create(model=MODEL, input="a cat", encoding_format="float").data[0].embedding
    assert floats == pytest.approx(vectors[0], rel=1e-5)


def test_a_too_long_request_gets_vllms_context_length_error(sim: Sim) -> None:
    prompt = "word " * 4090
    tokens = httpx.post(sim.base + "/tokenize", json={"messages": user(prompt)}).json()["count"]
    with pytest.raises(openai.BadRequestError) as caught:
        sim.openai().chat.completions.create(model=MODEL, messages=user(prompt), max_tokens=100)
    assert caught.value.status_code == 400
    body: Any = caught.value.body
    assert body["type"] == "BadRequestError" and body["code"] == 400
    assert body["message"] == (
        f"This model's maximum context length is 4096 tokens. However, you requested {tokens + 100} tokens "
        f"({tokens} in the messages, 100 in the completion). Please reduce the length of the messages or completion."
    )


# what vLLM 0.32 answers each (tests/data/vllm-0.32.0-cpu-validation-errors.json)
@pytest.mark.parametrize(
    ("field", "value", "message", "param"),
    [
        (
            "temperature",
            -1,
            "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
            "temperature",
        ),
        ("temperature", 3, "temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)", "temperature"),
        ("top_p", 0, "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)", "top_p"),
        ("presence_penalty", 3, "presence_penalty must be in [-2, 2], got 3.0.", None),
        ("n", 0, "n must be at least 1, got 0.", None),
        (
            "temperature",
            "hot",
            "1 validation error:\n  {'type': 'float_parsing', 'loc': 'body.temperature', 'msg': 'Input should be a "
            "valid number, unable to parse string as a number', 'input': 'hot'}",
            "body.temperature",
        ),
    ],
)
def test_a_sampling_field_out_of_its_range_gets_vllms_400_in_its_words(
    sim: Sim, field: str, value: object, message: str, param: str | None
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sim.openai().chat.completions.create(model=MODEL, messages=user("Hi"), max_tokens=2, **{field: value})  # type: ignore[call-overload]
    body: Any = caught.value.body
    assert (body["message"], body["param"], body["code"]) == (message, param, 400)


def test_an_unknown_model_is_a_404(sim: Sim) -> None:
    with pytest.raises(openai.NotFoundError):
        sim.openai().chat.completions.create(model="nope", messages=user("Hi"))


def test_a_wrong_key_is_a_401_and_open_routes_stay_open(sim: Sim) -> None:
    with pytest.raises(openai.AuthenticationError):
        sim.openai(api_key="wrong").models.list()
    resp = httpx.post(sim.base + "/v1/chat/completions", json={"messages": user("Hi")})
    assert resp.status_code == 401 and resp.json() == {"error": "Unauthorized"}
    assert httpx.get(sim.base + "/health").status_code == 200
    assert httpx.get(sim.base + "/version").json() == {"version": "0.32.0+sim"}
    assert httpx.get(sim.base + "/metrics").status_code == 200
    assert httpx.post(sim.base + "/tokenize", json={"prompt": "Hello, world"}).json()["count"] == 3


def test_unknown_flags_are_warned_about_and_vllm_flags_accepted(sim: Sim) -> None:
    log = sim.output()
    assert "ignoring unknown arguments: --bogus-flag 7" in log
    assert "--dtype" not in log and "--enforce-eager" not in log
