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
