"""What the agent counters read in an answer (gateway.answers), whole or streamed, in each of the three APIs:
tool-call parse failures, length cuts, empty answers, hidden reasoning tokens."""

import json
from typing import Any

import pytest

from gateway.answers import AnswerCounts, for_request, tally_whole
from gateway.sse import StreamKind, StreamWatcher

TOOLS = {"tools": [{"type": "function", "function": {"name": "f"}}]}


def chat_stream(deltas: list[dict[str, Any]], finish: str, usage: dict[str, Any] | None = None) -> bytes:
    events = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    events += [{"choices": [], "usage": usage}] if usage else []
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def call(arguments: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": arguments}}]}


def responses_stream(kinds: list[tuple[str, dict[str, Any]]], status: str = "completed") -> bytes:
    done = {
        "type": "response.completed",
        "response": {
            "status": status,
            "usage": {"input_tokens": 1},
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        },
    }
    events = [{"type": kind, **fields} for kind, fields in kinds] + [done]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def messages_stream(deltas: list[dict[str, Any]], stop: str, tool: bool = False) -> bytes:
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}} if tool else {"type": "text"},
    }
    events = [{"type": "message_start", "message": {"usage": {"input_tokens": 3}}}, start]
    events += [{"type": "content_block_delta", "index": 0, "delta": d} for d in deltas]
    events += [
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 2}},
        {"type": "message_stop"},
    ]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def counted(kind: StreamKind, stream: bytes, request: dict[str, Any]) -> AnswerCounts:
    watcher = StreamWatcher(kind, for_request("/v1/chat/completions", request))
    for i in range(0, len(stream), 7):  # split anywhere
        watcher.feed(stream[i : i + 7])
    assert watcher.complete
    return watcher.tally.result(watcher.finish_reason)


BAD_ARGS = '{"city": "Par'
STREAMS = {
    "chat: arguments not JSON": (StreamKind.CHAT, chat_stream([call(BAD_ARGS)], "tool_calls"), TOOLS, 1),
    "chat: a call written as text": (
        StreamKind.CHAT,
        chat_stream([{"content": '<tool_call>{"name": "f"}'}], "stop"),
        TOOLS,
        1,
    ),
    "chat: required but none": (
        StreamKind.CHAT,
        chat_stream([{"content": "no"}], "stop"),
        {**TOOLS, "tool_choice": "required"},
        1,
    ),
    "chat: a good call": (StreamKind.CHAT, chat_stream([call('{"city": "Paris"}')], "tool_calls"), TOOLS, 0),
    "responses: arguments not JSON": (
        StreamKind.RESPONSES,
        responses_stream(
            [
                ("response.output_item.added", {"output_index": 0, "item": {"type": "function_call"}}),
                ("response.function_call_arguments.delta", {"output_index": 0, "delta": BAD_ARGS}),
            ]
        ),
        TOOLS,
        1,
    ),
    "messages: a call written as text": (
        StreamKind.MESSAGES,
        messages_stream([{"type": "text_delta", "text": "[TOOL_CALLS] f"}], "end_turn"),
        TOOLS,
        1,
    ),
    "messages: arguments not JSON": (
        StreamKind.MESSAGES,
        messages_stream([{"type": "input_json_delta", "partial_json": BAD_ARGS}], "tool_use", tool=True),
        TOOLS,
        1,
    ),
}


@pytest.mark.parametrize(("kind", "stream", "request_", "failures"), list(STREAMS.values()), ids=list(STREAMS))
def test_tool_call_parse_failures_are_counted_in_every_api(
    kind: StreamKind, stream: bytes, request_: dict[str, Any], failures: int
) -> None:
    counts = counted(kind, stream, request_)
    assert counts.tool_call_failures == failures and not counts.length_cut


def test_a_length_cut_is_not_a_parse_failure_and_an_empty_answer_is_empty() -> None:
    cut = counted(StreamKind.CHAT, chat_stream([call(BAD_ARGS)], "length"), TOOLS)
    assert cut.length_cut and cut.tool_call_failures == 0 and not cut.empty
    incomplete = counted(
        StreamKind.RESPONSES, responses_stream([("response.output_text.delta", {"delta": "x"})], "incomplete"), {}
    )
    assert incomplete.length_cut
    assert counted(StreamKind.MESSAGES, messages_stream([], "max_tokens"), {}).length_cut
    empty = counted(StreamKind.CHAT, chat_stream([{"reasoning": "hm"}], "stop"), {})
    assert empty.empty and empty.reasoning_tokens == 1  # reasoning alone is empty to the client


def test_reasoning_tokens_come_from_the_engines_count_else_the_pieces_seen() -> None:
    reported = {"prompt_tokens": 1, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 6}}
    assert (
        counted(
            StreamKind.CHAT, chat_stream([{"reasoning_content": "a"}, {"content": "b"}], "stop", reported), {}
        ).reasoning_tokens
        == 6
    )
    thinking = [{"type": "thinking_delta", "thinking": "a"}] * 3 + [{"type": "text_delta", "text": "b"}]
    pieces = counted(StreamKind.MESSAGES, messages_stream(thinking, "end_turn"), {})
    assert pieces.reasoning_tokens == 3 and not pieces.empty


@pytest.mark.parametrize(
    ("answer", "failures", "empty"),
    [
        (
            {
                "choices": [
                    {
                        "message": {"content": None, "tool_calls": [{"function": {"arguments": BAD_ARGS}}]},
                        "finish_reason": "tool_calls",
                    }
                ]
            },
            1,
            False,
        ),
        (
            {"object": "response", "status": "completed", "output": [{"type": "function_call", "arguments": BAD_ARGS}]},
            1,
            False,
        ),
        ({"content": [{"type": "text", "text": "<tool_call>"}], "stop_reason": "end_turn"}, 1, False),
        ({"choices": [{"message": {"content": ""}, "finish_reason": "stop"}]}, 0, True),
    ],
)
def test_whole_answers_are_counted_as_streams_are(answer: dict[str, Any], failures: int, empty: bool) -> None:
    tally = for_request("/v1/chat/completions", TOOLS)
    counts = tally.result(tally_whole(tally, answer))
    assert (counts.tool_call_failures, counts.empty) == (failures, empty)
