"""Anthropic Messages <-> OpenAI chat translation: requests, whole answers, streams, and the anthropic SDK's
own decoder reading what comes out (through a mock transport standing in for the network only)."""

import json
from typing import Any

import anthropic
import httpx2
import pytest

from gateway.errors import Surface
from gateway.stream_errors import stream_error_event
from gateway.translate import TranslationError, chat_to_message, messages_to_chat, stop_reason
from gateway.translate_stream import ChatStreamToMessages

Json = dict[str, Any]
USER_HI: Json = {"role": "user", "content": "Hi"}
WEATHER: Json = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
WEATHER_FN: Json = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Weather for a city", "parameters": WEATHER["input_schema"]},
}
PNG: Json = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
PNG_PART: Json = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}

# (case, Anthropic request, the chat request expected); "model" and "messages" are added to both when absent.
REQUESTS: list[tuple[str, Json, Json]] = [
    ("plain string content", {"messages": [USER_HI]}, {"messages": [{"role": "user", "content": "Hi"}]}),
    (
        "system string",
        {"system": "Be terse.", "messages": [USER_HI]},
        {"messages": [{"role": "system", "content": "Be terse."}, USER_HI]},
    ),
    (
        "system blocks with cache_control",
        {
            "system": [
                {"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Answer in English."},
            ],
            "messages": [USER_HI],
        },
        {"messages": [{"role": "system", "content": "Be terse.\nAnswer in English."}, USER_HI]},
    ),
    (
        "one text block becomes a string",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"x": 1}}]}]},
        {"messages": [USER_HI]},
    ),
    (
        "text and base64 image",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, PNG]}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, PNG_PART]}]},
    ),
    (
        "url image",
        {
            "messages": [
                {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://x/a.jpg"}}]}
            ]
        },
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.jpg"}}]}]},
    ),
    (
        "tool round trip",
        {
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "s"},
                        {"type": "text", "text": "Let me look."},
                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_2",
                            "is_error": True,
                            "content": [{"type": "text", "text": "no"}, {"type": "text", "text": "city"}, PNG],
                        },
                        {"type": "text", "text": "Thanks"},
                    ],
                },
            ]
        },
        {
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": "Let me look.",
                    "tool_calls": [
                        {
                            "id": "toolu_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        },
                        {"id": "toolu_2", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                    ],
                },
                {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},
                {"role": "tool", "tool_call_id": "toolu_2", "content": "no\ncity"},
                {"role": "user", "content": [PNG_PART, {"type": "text", "text": "Thanks"}]},
            ]
        },
    ),
    (
        "assistant with only a tool call has null content",
        {
            "messages": [
                USER_HI,
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
            ]
        },
        {
            "messages": [
                USER_HI,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
                },
                {"role": "tool", "tool_call_id": "t", "content": ""},
            ]
        },
    ),
    (
        "a trailing assistant message is continued",
        {"messages": [USER_HI, {"role": "assistant", "content": "Hello,"}]},
        {
            "messages": [USER_HI, {"role": "assistant", "content": "Hello,"}],
            "continue_final_message": True,
            "add_generation_prompt": False,
        },
    ),
    (
        "sampling, stop sequences, stream; metadata, thinking and unknown fields dropped",
        {
            "messages": [USER_HI],
            "max_tokens": 100,
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 40,
            "stop_sequences": ["END", "\n\n"],
            "stream": True,
            "metadata": {"user_id": "u"},
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "service_tier": "auto",
            "temperature_unused": None,
        },
        {
            "messages": [USER_HI],
            "max_tokens": 100,
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 40,
            "stop": ["END", "\n\n"],
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    ),
    ("stream false is left out", {"messages": [USER_HI], "stream": False}, {"messages": [USER_HI]}),
    (
        "tools, no tool_choice",
        {"messages": [USER_HI], "tools": [WEATHER]},
        {"messages": [USER_HI], "tools": [WEATHER_FN]},
    ),
    (
        "tool_choice auto",
        {"messages": [USER_HI], "tools": [WEATHER], "tool_choice": {"type": "auto"}},
        {"messages": [USER_HI], "tools": [WEATHER_FN], "tool_choice": "auto"},
    ),
    (
        "tool_choice any, no parallel calls",
        {"messages": [USER_HI], "tools": [WEATHER], "tool_choice": {"type": "any", "disable_parallel_tool_use": True}},
        {"messages": [USER_HI], "tools": [WEATHER_FN], "tool_choice": "required", "parallel_tool_calls": False},
    ),
    (
        "tool_choice tool",
        {"messages": [USER_HI], "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"}},
        {
            "messages": [USER_HI],
            "tools": [WEATHER_FN],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        },
    ),
    (
        "tool_choice none",
        {"messages": [USER_HI], "tools": [WEATHER], "tool_choice": {"type": "none"}},
        {"messages": [USER_HI], "tools": [WEATHER_FN], "tool_choice": "none"},
    ),
    (
        "a tool without description or schema; server tools and a choice without tools dropped",
        {
            "messages": [USER_HI],
            "tools": [
                {"name": "ping", "cache_control": {"type": "ephemeral"}},
                {"type": "web_search_20250305", "name": "web_search"},
            ],
        },
        {
            "messages": [USER_HI],
            "tools": [
                {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
            ],
        },
    ),
    ("tool_choice without tools", {"messages": [USER_HI], "tool_choice": {"type": "any"}}, {"messages": [USER_HI]}),
]


@pytest.mark.parametrize(("request_", "expected"), [(r, e) for _, r, e in REQUESTS], ids=[c for c, _, _ in REQUESTS])
def test_messages_requests_become_chat_requests(request_: Json, expected: Json) -> None:
    assert messages_to_chat({"model": "m", **request_}) == {"model": "m", **expected}


@pytest.mark.parametrize(
    "messages",
    [None, [], "Hi", [{"role": "tool", "content": "x"}], [{"role": "user", "content": 3}], ["Hi"]],
)
def test_untranslatable_requests_raise(messages: Any) -> None:
    with pytest.raises(TranslationError):
        messages_to_chat({"model": "m", "max_tokens": 5, "messages": messages})


@pytest.mark.parametrize(
    ("finish", "stop_string", "tool_use", "expected"),
    [
        ("stop", None, False, "end_turn"),
        ("stop", "END", False, "stop_sequence"),
        ("length", None, False, "max_tokens"),
        ("tool_calls", None, True, "tool_use"),
        ("function_call", None, False, "tool_use"),
        ("stop", None, True, "tool_use"),  # vLLM's answer to a forced tool call
        ("content_filter", None, False, "refusal"),
        (None, None, False, "end_turn"),
        ("abort", None, False, "end_turn"),
    ],
)
def test_stop_reasons(finish: str | None, stop_string: str | None, tool_use: bool, expected: str) -> None:
    assert stop_reason(finish, stop_string, tool_use=tool_use) == expected


def completion(message: Json, finish: str | None, usage: Json | None = None, **choice: Any) -> Json:
    """A non-streamed chat completion in vLLM's shape."""
    usage = usage or {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18, "prompt_tokens_details": None}
    body = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish, **choice}
    return {"id": "chatcmpl-abc", "object": "chat.completion", "model": "engine", "choices": [body], "usage": usage}


def call(call_id: str, name: str, arguments: str) -> Json:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


TEXT = {"type": "text", "text": "Hello"}
USAGE = {"input_tokens": 11, "output_tokens": 7}
# (case, chat completion, expected content, stop_reason, stop_sequence, usage)
ANSWERS: list[tuple[str, Json, list[Json], str, str | None, Json]] = [
    (
        "text",
        completion({"content": "Hello", "tool_calls": []}, "stop", stop_reason=None),
        [TEXT],
        "end_turn",
        None,
        USAGE,
    ),
    ("max tokens", completion({"content": "Hello"}, "length"), [TEXT], "max_tokens", None, USAGE),
    ("stop string", completion({"content": "Hello"}, "stop", stop_reason="END"), [TEXT], "stop_sequence", "END", USAGE),
    ("stop token id", completion({"content": "Hello"}, "stop", stop_reason=128009), [TEXT], "end_turn", None, USAGE),
    ("refusal", completion({"content": "Hello"}, "content_filter"), [TEXT], "refusal", None, USAGE),
    (
        "text and two tool calls",
        completion(
            {
                "content": "Looking.",
                "tool_calls": [call("c1", "get_weather", '{"city": "Paris"}'), call("c2", "ping", "")],
            },
            "tool_calls",
        ),
        [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "c2", "name": "ping", "input": {}},
        ],
        "tool_use",
        None,
        USAGE,
    ),
    (
        "bad tool JSON, a non-object, a forced call ending in stop",
        completion({"content": None, "tool_calls": [call("c1", "f", '{"city": "Par'), call("c2", "g", "[1]")]}, "stop"),
        [
            {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
            {"type": "tool_use", "id": "c2", "name": "g", "input": {}},
        ],
        "tool_use",
        None,
        USAGE,
    ),
    (
        "cached prompt tokens",
        completion(
            {"content": ""},
            "stop",
            {"prompt_tokens": 50, "completion_tokens": 0, "prompt_tokens_details": {"cached_tokens": 32}},
        ),
        [{"type": "text", "text": ""}],  # an empty answer is one empty text block, as vLLM sends it
        "end_turn",
        None,
        {"input_tokens": 18, "output_tokens": 0, "cache_read_input_tokens": 32},  # Anthropic's: uncached part
    ),
]


@pytest.mark.parametrize(
    ("answer", "content", "reason", "sequence", "usage"), [a[1:] for a in ANSWERS], ids=[a[0] for a in ANSWERS]
)
def test_chat_answers_become_messages(
    answer: Json, content: list[Json], reason: str, sequence: str | None, usage: Json
) -> None:
    message = chat_to_message(answer, "claude-local")
    assert message == {
        "id": "msg_abc",
        "type": "message",
        "role": "assistant",
        "model": "claude-local",
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage,
    }
    parsed = sdk_client(json.dumps(message).encode(), "application/json").messages.create(**SDK_ARGS)
    assert parsed.to_dict() == message


def test_an_answer_without_choices_or_ids_still_translates() -> None:
    message = chat_to_message({"choices": [{"message": {"tool_calls": [{"function": {"name": "f"}}]}}]}, "m")
    assert message["id"].startswith("msg_") and message["usage"] == {"input_tokens": 0, "output_tokens": 0}
    assert message["content"][0]["id"].startswith("toolu_") and message["content"][0]["input"] == {}
    assert chat_to_message({}, "m")["content"] == [{"type": "text", "text": ""}]


# Streams: the engine's chunks (vLLM's shapes), and the Anthropic events expected after message_start.
HEAD = {"id": "chatcmpl-s1", "object": "chat.completion.chunk", "created": 1, "model": "engine"}


def chunk(delta: Json | None = None, finish: str | None = None, **choice: Any) -> Json:
    return {
        **HEAD,
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish, **choice}],
    }


def usage_chunk(prompt: int, completion: int) -> Json:
    return {
        **HEAD,
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def piece(text: str) -> Json:
    return chunk({"content": text})


def tool_head(index: int, call_id: str, name: str) -> Json:
    return chunk(
        {
            "tool_calls": [
                {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
            ]
        }
    )


def tool_args(index: int, arguments: str) -> Json:
    return chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})


NO_CACHE = {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}  # both always said, 0 when not reported
USAGE_9_5 = {"input_tokens": 9, **NO_CACHE, "output_tokens": 5}


def opens_text(i: int) -> Json:
    return {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}


def opens_tool(i: int, call_id: str, name: str) -> Json:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return {"type": "content_block_start", "index": i, "content_block": block}


def says(i: int, text: str) -> Json:
    return {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": text}}


def passes(i: int, partial: str) -> Json:
    return {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": partial}}


def closes(i: int) -> Json:
    return {"type": "content_block_stop", "index": i}


def ends(reason: str, sequence: str | None = None, usage: Json | None = USAGE_9_5) -> list[Json]:
    """message_delta and message_stop; ``usage`` None when the engine sent no usage chunk."""
    usage = usage or {"output_tokens": 0}
    return [
        {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage},
        {"type": "message_stop"},
    ]


ROLE = chunk({"role": "assistant", "content": ""})
# (case, engine chunks, Anthropic events after message_start, final content as the SDK assembles it)
STREAMS: list[tuple[str, list[Json], list[Json], list[Json]]] = [
    (
        "text",
        [ROLE, piece("Hel"), piece("lo"), chunk(finish="stop", stop_reason=None), usage_chunk(9, 5)],
        [opens_text(0), says(0, "Hel"), says(0, "lo"), closes(0), *ends("end_turn")],
        [{"type": "text", "text": "Hello"}],
    ),
    (
        "stop sequence",
        [ROLE, piece("Hi"), chunk(finish="stop", stop_reason="END"), usage_chunk(9, 5)],
        [opens_text(0), says(0, "Hi"), closes(0), *ends("stop_sequence", "END")],
        [{"type": "text", "text": "Hi"}],
    ),
    (
        "text, tool call, text",
        [
            ROLE,
            piece("Let me check."),
            tool_head(0, "call_1", "get_weather"),
            tool_args(0, '{"city": '),
            tool_args(0, '"Paris"}'),
            piece("Done."),
            chunk(finish="tool_calls"),
            usage_chunk(9, 5),
        ],
        [
            opens_text(0),
            says(0, "Let me check."),
            closes(0),
            opens_tool(1, "call_1", "get_weather"),
            passes(1, '{"city": '),
            passes(1, '"Paris"}'),
            closes(1),
            opens_text(2),
            says(2, "Done."),
            closes(2),
            *ends("tool_use"),
        ],
        [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "text", "text": "Done."},
        ],
    ),
    (
        "two tool calls, the second's id repeated on every piece, ending in stop",
        [
            ROLE,
            tool_head(0, "call_1", "get_weather"),
            tool_args(0, '{"city": "Oslo"}'),
            tool_head(1, "call_2", "ping"),
            chunk({"tool_calls": [{"index": 1, "id": "call_2", "function": {"arguments": "{}"}}]}),
            chunk(finish="stop"),
            usage_chunk(9, 5),
        ],
        [
            opens_tool(0, "call_1", "get_weather"),
            passes(0, '{"city": "Oslo"}'),
            closes(0),
            opens_tool(1, "call_2", "ping"),
            passes(1, "{}"),
            closes(1),
            *ends("tool_use"),
        ],
        [
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "call_2", "name": "ping", "input": {}},
        ],
    ),
    (
        "two tool calls both at index 0, told apart by their ids",
        [
            ROLE,
            tool_head(0, "call_1", "f"),
            tool_args(0, "{}"),
            tool_head(0, "call_2", "g"),
            chunk(finish="tool_calls"),
        ],
        [
            opens_tool(0, "call_1", "f"),
            passes(0, "{}"),
            closes(0),
            opens_tool(1, "call_2", "g"),
            closes(1),
            *ends("tool_use", usage=None),
        ],
        [
            {"type": "tool_use", "id": "call_1", "name": "f", "input": {}},
            {"type": "tool_use", "id": "call_2", "name": "g", "input": {}},
        ],
    ),
    (
        "no usage chunk, cut by max tokens",
        [ROLE, piece("Hi"), chunk(finish="length")],
        [opens_text(0), says(0, "Hi"), closes(0), *ends("max_tokens", usage=None)],
        [{"type": "text", "text": "Hi"}],
    ),
    ("an empty answer", [ROLE, chunk(finish="stop"), usage_chunk(9, 5)], ends("end_turn"), []),
]
STREAM_IDS = [s[0] for s in STREAMS]


def engine_stream(chunks: list[Json], done: bool = True) -> bytes:
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return body + (b"data: [DONE]\n\n" if done else b"")


def translate(raw: bytes, sizes: list[int] | None = None) -> tuple[bytes, ChatStreamToMessages]:
    """Feed ``raw`` in pieces of the given sizes, cycled (all at once without), then finish."""
    translator = ChatStreamToMessages("claude-local")
    out, at, turn = bytearray(), 0, 0
    while at < len(raw):
        size = sizes[turn % len(sizes)] if sizes else len(raw)
        out += translator.feed(raw[at : at + size])
        at, turn = at + size, turn + 1
    out += translator.finish()
    return bytes(out), translator


def events(raw: bytes) -> list[Json]:
    """The data of each Anthropic event, checking that ``event:`` names its type."""
    out = []
    for block in raw.decode().split("\n\n")[:-1]:
        name, data = block.split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert name == "event: " + payload["type"]
        out.append(payload)
    assert raw.endswith(b"\n\n") or not raw
    return out


@pytest.mark.parametrize(("chunks", "expected"), [(s[1], s[2]) for s in STREAMS], ids=STREAM_IDS)
def test_streams_give_the_documented_events(chunks: list[Json], expected: list[Json]) -> None:
    raw, translator = translate(engine_stream(chunks))
    start, *rest = events(raw)
    message = {"id": "msg_s1", "type": "message", "role": "assistant", "model": "claude-local", "content": []}
    # message_start waits for usage or the first block: an answer without blocks says the engine's count at its end
    blockless = expected[0]["type"] == "message_delta" and expected[0]["usage"] == USAGE_9_5
    usage = {"input_tokens": 9 if blockless else 0, **NO_CACHE, "output_tokens": 0}
    assert start == {
        "type": "message_start",
        "message": {**message, "stop_reason": None, "stop_sequence": None, "usage": usage},
    }
    assert rest == expected
    assert translator.complete


@pytest.mark.parametrize("chunks", [s[1] for s in STREAMS], ids=STREAM_IDS)
def test_any_split_crlf_or_no_space_gives_the_same_bytes(chunks: list[Json]) -> None:
    raw = engine_stream(chunks)
    whole, _ = translate(raw)
    assert translate(raw, [1])[0] == whole
    assert translate(raw, [7, 13, 2, 31])[0] == whole
    assert translate(raw.replace(b"\n", b"\r\n"), [3, 1, 5])[0] == whole
    assert translate(raw.replace(b"data: ", b"data:"), [11])[0] == whole


def test_usage_in_an_early_chunk_reaches_message_start() -> None:
    early = {**piece("Hi"), "usage": {"prompt_tokens": 4, "completion_tokens": 1}}
    first, *_ = events(translate(engine_stream([early, chunk(finish="stop")]))[0])
    assert first["message"]["usage"] == {"input_tokens": 4, **NO_CACHE, "output_tokens": 0}


# (case, engine stream bytes) that end improperly
CUT: list[tuple[str, bytes]] = [
    ("cut before the finish", engine_stream([ROLE, piece("Hel"), piece("lo")], done=False)),
    ("cut inside a tool call", engine_stream([ROLE, tool_head(0, "c", "f"), tool_args(0, '{"a"')], done=False)),
    ("finish but no [DONE]", engine_stream([ROLE, piece("Hi"), chunk(finish="stop")], done=False)),
    ("[DONE] but no finish", engine_stream([ROLE, piece("Hi")])),
    ("cut mid-event", engine_stream([ROLE, piece("Hi")], done=False) + b'data: {"id": "chatcmpl-s1", "choi'),
]


@pytest.mark.parametrize("raw", [c[1] for c in CUT], ids=[c[0] for c in CUT])
def test_a_cut_stream_is_incomplete_and_never_stopped(raw: bytes) -> None:
    translator = ChatStreamToMessages("m")
    sent = translator.feed(raw)
    assert translator.finish() == b""
    kinds = [e["type"] for e in events(sent)]
    assert kinds[0] == "message_start" and "content_block_delta" in kinds
    assert "message_delta" not in kinds and "message_stop" not in kinds and "content_block_stop" not in kinds
    assert not translator.complete


def test_an_unterminated_done_line_is_read_at_finish() -> None:
    translator = ChatStreamToMessages("m")
    sent = translator.feed(engine_stream([ROLE, piece("Hi"), chunk(finish="stop")], done=False) + b"data: [DONE]")
    assert not translator.complete
    assert [e["type"] for e in events(translator.finish())] == ["content_block_stop", "message_delta", "message_stop"]
    assert translator.complete and sent.count(b"event: ") == 3


def test_nothing_follows_message_stop() -> None:
    raw = engine_stream([ROLE, piece("Hi"), chunk(finish="stop")]) + engine_stream(
        [piece("again"), chunk(finish="stop")]
    )
    kinds = [e["type"] for e in events(translate(raw)[0])]
    assert kinds[-1] == "message_stop" and kinds.count("message_stop") == 1 and kinds.count("content_block_delta") == 1


# The anthropic SDK reads the produced bytes as if an engine with /v1/messages had sent them.
SDK_ARGS: Json = {"model": "claude-local", "max_tokens": 64, "messages": [USER_HI]}


def sdk_client(body: bytes, content_type: str = "text/event-stream") -> anthropic.Anthropic:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, content=body)

    http = httpx2.Client(transport=httpx2.MockTransport(answer))
    return anthropic.Anthropic(api_key="k", base_url="http://engine.invalid", http_client=http, max_retries=0)


@pytest.mark.parametrize(("chunks", "expected", "content"), [s[1:] for s in STREAMS], ids=STREAM_IDS)
def test_the_sdk_assembles_the_stream(chunks: list[Json], expected: list[Json], content: list[Json]) -> None:
    raw, _ = translate(engine_stream(chunks), [5])
    kinds = [event.type for event in sdk_client(raw).messages.create(**SDK_ARGS, stream=True)]
    assert kinds == ["message_start"] + [e["type"] for e in expected]
    with sdk_client(raw).messages.stream(**SDK_ARGS) as stream:
        final = stream.get_final_message()
    assert [block.to_dict() for block in final.content] == content
    assert final.stop_reason == expected[-2]["delta"]["stop_reason"]
    assert final.stop_sequence == expected[-2]["delta"]["stop_sequence"]
    assert final.usage.output_tokens == expected[-2]["usage"]["output_tokens"] and final.id == "msg_s1"


def test_the_sdk_raises_on_a_cut_stream_followed_by_the_gateways_error_event() -> None:
    sent, _ = translate(CUT[0][1])
    raw = sent + stream_error_event("The engine broke off its answer.", "upstream_truncated", Surface.ANTHROPIC)
    with (
        pytest.raises(anthropic.APIStatusError, match="broke off"),
        sdk_client(raw).messages.stream(**SDK_ARGS) as stream,
    ):
        stream.get_final_message()
