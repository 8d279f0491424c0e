"""The gateway's side-copy stream watcher: split reads, CRLF, no space after data:, each API's terminal event; and
DataEvents, which leaves a chat stream one data: line per event; MessageStartUsage's cache fields; the pieces
plain_events lets the relay write straight to the client."""

import json

from gateway.engine_messages import StreamScrubber
from gateway.sse import (
    CACHE_FIELDS,
    DataEvents,
    LineEnds,
    MessageStartUsage,
    StreamKind,
    StreamWatcher,
    UsageStripper,
    plain_events,
)
from tests.conftest import ROOT


def chunk(delta: str, finish: str | None = None) -> bytes:
    event = {"choices": [{"index": 0, "delta": {"content": delta}, "finish_reason": finish}]}
    return f"data: {json.dumps(event)}\n\n".encode()


def test_it_sees_a_complete_stream_fed_byte_by_byte() -> None:
    stream = chunk("Hel") + chunk("lo", "stop") + b"data: [DONE]\n\n"
    watcher = StreamWatcher()
    for i in range(len(stream)):
        watcher.feed(stream[i : i + 1])
    assert watcher.complete and watcher.finish_reason == "stop"


def test_it_accepts_crlf_and_no_space_after_data() -> None:
    watcher = StreamWatcher()
    watcher.feed(chunk("x", "length").replace(b"data: ", b"data:").replace(b"\n", b"\r\n"))
    watcher.feed(b"data:[DONE]\r\n\r\n")
    assert watcher.complete and watcher.finish_reason == "length"


def test_a_stream_without_done_is_incomplete() -> None:
    watcher = StreamWatcher()
    watcher.feed(chunk("Hel") + chunk("lo"))
    assert not watcher.complete


def test_done_without_a_finish_reason_is_incomplete() -> None:
    watcher = StreamWatcher()
    watcher.feed(chunk("Hel") + b"data: [DONE]\n\n")
    assert not watcher.complete


def test_it_keeps_usage() -> None:
    watcher = StreamWatcher()
    watcher.feed(b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}\n\n')
    assert watcher.usage == {"prompt_tokens": 3, "completion_tokens": 4}


def test_an_anthropic_stream_is_complete_only_with_message_stop() -> None:
    events = [
        ("message_start", {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"text": "hi"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
        ),
    ]
    raw = b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)
    watcher = StreamWatcher(StreamKind.MESSAGES)
    watcher.feed(raw)
    assert not watcher.complete and watcher.finish_reason == "end_turn"
    watcher.feed(b'event: message_stop\ndata: {"type": "message_stop"}\n\n')
    assert watcher.complete and watcher.usage == {"input_tokens": 3, "output_tokens": 1}


def test_a_responses_stream_is_complete_with_response_completed() -> None:
    watcher = StreamWatcher(StreamKind.RESPONSES)
    watcher.feed(b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "delta": "x"}\n\n')
    assert not watcher.complete
    watcher.feed(b'data: {"type": "response.completed", "response": {"usage": {"total_tokens": 9}}}\n\n')
    assert watcher.complete and watcher.usage == {"total_tokens": 9}


def test_the_usage_chunk_the_gateway_asked_for_is_stripped_wherever_reads_split() -> None:
    stream = (
        chunk("Hel")
        + chunk("lo", "stop")
        + b'data: {"choices": [], "usage": {"prompt_tokens": 1}}\n\n'
        + b"data: [DONE]\n\n"
    )
    for size in (1, 7, len(stream)):
        stripper = UsageStripper()
        out = b"".join(stripper.feed(stream[i : i + size]) for i in range(0, len(stream), size)) + stripper.flush()
        assert out == chunk("Hel") + chunk("lo", "stop") + b"data: [DONE]\n\n"


def test_it_notices_the_first_generated_token() -> None:
    watcher = StreamWatcher()
    watcher.feed(b'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}\n\n')
    assert not watcher.token_seen
    watcher.feed(chunk("x"))
    assert watcher.token_seen


def compact(event: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


def test_compact_chunks_after_the_first_token_still_give_finish_reason_usage_and_errors() -> None:
    watcher = StreamWatcher()
    content = {"choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": None, "finish_reason": None}]}
    watcher.feed(compact(content) * 3)
    assert watcher.token_seen and watcher.finish_reason is None
    watcher.feed(compact({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
    watcher.feed(compact({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}}))
    watcher.feed(b"data: [DONE]\n\n")
    assert watcher.complete and watcher.finish_reason == "length"
    assert watcher.usage == {"prompt_tokens": 2, "completion_tokens": 3}
    watcher.feed(compact({"error": {"message": "boom"}}))
    assert watcher.error


def test_a_finish_reason_behind_escapes_or_next_to_a_null_one_is_read() -> None:
    escaped = StreamWatcher()
    escaped.feed(chunk("x") + b'data: {"choices": [{"index": 0, "delta": {}, "finish\\u005freason": "stop"}]}\n\n')
    assert escaped.finish_reason == "stop"
    two = StreamWatcher()
    choices = [{"index": 0, "delta": {}, "finish_reason": None}, {"index": 1, "delta": {}, "finish_reason": "stop"}]
    two.feed(chunk("x") + compact({"choices": choices}))
    assert two.finish_reason == "stop"


def test_a_content_that_quotes_finish_reason_or_usage_is_only_content() -> None:
    watcher = StreamWatcher()
    watcher.feed(chunk("x") + chunk('"finish_reason":null "usage"') + chunk('{"finish_reason": "stop"}'))
    assert watcher.finish_reason is None and watcher.usage is None
    stripper = UsageStripper()
    assert stripper.feed(chunk('"usage"')) == chunk('"usage"')


def test_the_usage_chunk_is_stripped_when_each_read_is_one_whole_event() -> None:
    usage = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":1}}\n\n'
    reads = [chunk("Hel"), chunk("lo", "stop"), usage, b"data: [DONE]\n\n"]
    stripper = UsageStripper()
    out = b"".join(stripper.feed(read) for read in reads) + stripper.flush()
    assert out == chunk("Hel") + chunk("lo", "stop") + b"data: [DONE]\n\n"


def test_data_events_keep_only_data_one_line_per_event_however_the_stream_is_split() -> None:
    raw = (ROOT / "tests/data/streams/lines-without-data.sse").read_bytes()
    raw += b'data: {"a":\r\ndata: 1}\r\n\r\n: a comment\n\ndata: [DONE]'  # CRLF, two data: lines, no last blank line

    def through(size: int) -> bytes:
        ends, events, out = LineEnds(), DataEvents(), b""
        for at in range(0, len(raw), size):
            out += events.feed(ends.feed(raw[at : at + size]))
        return out + events.flush()

    whole = through(len(raw))
    assert all(through(size) == whole for size in (1, 2, 7, 64))
    blocks = whole.split(b"\n\n")
    assert blocks[-1] == b"" and all(b.startswith(b"data: ") and b"\n" not in b for b in blocks[:-1])
    data = [b[6:] for b in blocks[:-1]]
    assert len(data) == 7 and data[-2:] == [b'{"a": 1}', b"[DONE]"]  # the two lines joined by JSON whitespace


def test_data_events_pass_plain_data_events_on_as_they_are() -> None:
    plain = chunk("Hel") + chunk("lo, data: \\n\\ndata:")
    assert DataEvents().feed(plain) is plain


def test_message_start_gets_both_cache_fields_however_the_stream_is_split() -> None:
    raw = (ROOT / "tests/data/streams/vllm-native-messages.sse").read_bytes()
    for size in (1, 5, len(raw)):
        start = MessageStartUsage()
        out = b"".join(start.feed(raw[at : at + size]) for at in range(0, len(raw), size)) + start.flush()
        first, rest = out.split(b"\n\n", 1)
        usage = json.loads(first.split(b"data: ", 1)[1])["message"]["usage"]
        assert usage == {"input_tokens": 23, "output_tokens": 0, **dict.fromkeys(CACHE_FIELDS, 0)}
        assert rest == raw.split(b"\n\n", 1)[1]  # the events after it as they came


STREAMS = ROOT / "tests/data/streams"
NOT_PLAIN = [
    chunk("Hel").replace(b"\n", b"\r\n"),  # CRLF line ends
    chunk("Hel")[:-1],  # an event not ended yet
    chunk("Hel")[:20],
    b": a comment\n\n" + chunk("Hel"),
    b"id: 7\n" + chunk("Hel"),
    chunk("lo", "stop"),
    b"data: [DONE]\n\n",
    b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n',
    b'data: {"error": {"message": "CUDA error", "code": 500}}\n\n',
    b'data: {"object": "error", "message": "flat"}\n\n',
    b'data: {"choices": [{"index": 0, "delta": {"content": "\\u00e9"}, "finish_reason": null}]}\n\n',
    b'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}, "finish_reason": null}]}\n\n',
    b'data: {"choices": [{"index": 0, "delta": {"reasoning": "hm"}, "finish_reason": null}]}\n\n',
]


def events_of(raw: bytes) -> list[bytes]:
    """``raw``'s events one by one, and every run of two and of three events, as an engine's reads may carry them."""
    events = [event + b"\n\n" for event in raw.split(b"\n\n") if event]
    return [b"".join(events[at : at + n]) for n in (1, 2, 3) for at in range(len(events) - n + 1)]


def test_plain_events_are_what_every_reader_passes_on_as_it_is_counted_as_token_chunks() -> None:
    """The relay writes a piece that gateway.sse.plain_events counts straight to the client (issue 35): each reader
    of gateway.relay_stream must then pass it on unchanged, holding nothing, and the watcher count each event."""
    pieces = [chunk("Hel"), chunk("lo") + chunk(", data: \\n\\ndata:"), *NOT_PLAIN]
    for path in sorted(STREAMS.glob("*.sse")):
        pieces += events_of(path.read_bytes())
    plain = [piece for piece in pieces if plain_events(piece)]
    assert 2 <= len(plain) < len(pieces) and not any(plain_events(piece) for piece in NOT_PLAIN)
    for piece in plain:
        ends, events, stripper = LineEnds(), DataEvents(), UsageStripper()
        scrubber = StreamScrubber("an engine", chat=True)
        assert stripper.feed(scrubber.feed(events.feed(ends.feed(piece)))) == piece
        assert events.flush() == scrubber.flush() == stripper.flush() == b""
        watcher = StreamWatcher()
        watcher.feed(chunk("first"))
        watcher.feed(piece)
        assert watcher.token_chunks == 1 + plain_events(piece) and watcher.usage is None and watcher.error is None
        assert watcher.finish_reason is None and not watcher.done
        assert plain_events(piece) == piece.count(b"\n\n")  # JSON escapes a newline in a string
