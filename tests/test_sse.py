"""The gateway's side-copy stream watcher: split reads, CRLF, no space after data:, each API's terminal event."""

import json

from gateway.sse import StreamKind, StreamWatcher, UsageStripper


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
    stream = (chunk("Hel") + chunk("lo", "stop") + b'data: {"choices": [], "usage": {"prompt_tokens": 1}}\n\n'
              + b"data: [DONE]\n\n")  # fmt: skip
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
