"""Streams whose lines end in CRLF or a bare CR read exactly as LF ones, wherever the reads split them: the side
watcher, the usage stripper, and both translations (the SSE spec allows all three line ends).

A bare-CR stream used to be buffered to its end: its usage chunk leaked to a client that had not asked for
it, its usage was lost, and a false truncation error followed [DONE].
"""

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.responses_chat_stream import ChatStreamToResponses
from gateway.sse import LineEnds, StreamKind, StreamWatcher, UsageStripper
from gateway.translate_stream import ChatStreamToMessages


def data(event: Any) -> bytes:
    return b"data: " + (event if isinstance(event, bytes) else json.dumps(event).encode()) + b"\n\n"


def chat_stream() -> bytes:
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m"}
    pieces = [{"role": "assistant", "content": ""}, {"reasoning": "Hm."}, {"content": "Hel"}, {"content": "lo"}]
    chunks = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in pieces]
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}}
    chunks.append({**head, "choices": [], "usage": usage})
    return b"".join(data(c) for c in chunks) + data(b"[DONE]")


def messages_stream() -> bytes:
    events = [
        ("message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}},
        ),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(f"event: {n}\ndata: {json.dumps(e)}\n\n".encode() for n, e in events)


def responses_stream() -> bytes:
    done = {"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": 4}}}
    delta = {"type": "response.output_text.delta", "delta": "x"}
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in (delta, done))


ENDINGS = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}


def variants(stream: bytes) -> Iterator[tuple[str, int, list[bytes]]]:
    """The stream in each line ending, read in pieces of every size up to 9 and whole."""
    for name, end in ENDINGS.items():
        raw = stream.replace(b"\n", end)
        for size in [*range(1, 10), len(raw)]:
            yield name, size, [raw[i : i + size] for i in range(0, len(raw), size)]


def test_line_ends_become_lf_even_when_a_crlf_is_split_across_reads() -> None:
    for _, _, reads in variants(chat_stream()):
        ends = LineEnds()
        assert b"".join(ends.feed(r) for r in reads) == chat_stream()


@pytest.mark.parametrize(
    ("kind", "stream"),
    [
        (StreamKind.CHAT, chat_stream()),
        (StreamKind.MESSAGES, messages_stream()),
        (StreamKind.RESPONSES, responses_stream()),
    ],
    ids=["chat", "messages", "responses"],
)
def test_the_watcher_reads_every_ending_as_lf(kind: StreamKind, stream: bytes) -> None:
    expected = StreamWatcher(kind)
    expected.feed(stream)
    assert expected.complete and expected.usage
    for name, size, reads in variants(stream):
        watcher = StreamWatcher(kind)
        for read in reads:
            watcher.feed(read)
        seen = (watcher.complete, watcher.usage, watcher.finish_reason, watcher.token_chunks)
        assert seen == (True, expected.usage, expected.finish_reason, expected.token_chunks), (name, size)


def test_the_usage_chunk_is_stripped_whatever_the_line_ends() -> None:
    expected = b"".join(e + b"\n\n" for e in chat_stream().split(b"\n\n") if e and b'"usage"' not in e)
    for name, size, reads in variants(chat_stream()):
        ends, stripper = LineEnds(), UsageStripper()
        out = b"".join(stripper.feed(ends.feed(r)) for r in reads) + stripper.flush()
        assert out == expected, (name, size)


@pytest.mark.parametrize("translator", [ChatStreamToMessages, ChatStreamToResponses], ids=["messages", "responses"])
def test_translations_read_every_ending_as_lf(translator: Any) -> None:
    def make() -> Any:
        return translator("m") if translator is ChatStreamToMessages else translator({"model": "m"}, "m")

    def kinds(out: bytes) -> list[str]:
        return [json.loads(line[6:])["type"] for line in out.split(b"\n") if line.startswith(b"data: ")]

    reference = make()
    expected = kinds(reference.feed(chat_stream()) + reference.finish())
    assert reference.complete and expected[-1] in ("message_stop", "response.completed")
    for name, size, reads in variants(chat_stream()):
        converter = make()
        out = b"".join(converter.feed(r) for r in reads) + converter.finish()
        assert converter.complete and kinds(out) == expected and converter.usage == reference.usage, (name, size)
