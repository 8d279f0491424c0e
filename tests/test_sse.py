"""The gateway's side-copy stream watcher: split reads, CRLF, 'data:' without a space."""

import json

from gateway.sse import OpenAIStreamWatcher


def chunk(delta: str, finish: str | None = None) -> bytes:
    event = {"choices": [{"index": 0, "delta": {"content": delta}, "finish_reason": finish}]}
    return f"data: {json.dumps(event)}\n\n".encode()


def test_it_sees_a_complete_stream_fed_byte_by_byte() -> None:
    stream = chunk("Hel") + chunk("lo", "stop") + b"data: [DONE]\n\n"
    watcher = OpenAIStreamWatcher()
    for i in range(len(stream)):
        watcher.feed(stream[i : i + 1])
    assert watcher.complete and watcher.finish_reason == "stop"


def test_it_accepts_crlf_and_no_space_after_data() -> None:
    watcher = OpenAIStreamWatcher()
    watcher.feed(chunk("x", "length").replace(b"data: ", b"data:").replace(b"\n", b"\r\n"))
    watcher.feed(b"data:[DONE]\r\n\r\n")
    assert watcher.complete and watcher.finish_reason == "length"


def test_a_stream_without_done_is_incomplete() -> None:
    watcher = OpenAIStreamWatcher()
    watcher.feed(chunk("Hel") + chunk("lo"))
    assert not watcher.complete


def test_done_without_a_finish_reason_is_incomplete() -> None:
    watcher = OpenAIStreamWatcher()
    watcher.feed(chunk("Hel") + b"data: [DONE]\n\n")
    assert not watcher.complete


def test_it_keeps_usage() -> None:
    watcher = OpenAIStreamWatcher()
    watcher.feed(b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}\n\n')
    assert watcher.usage == {"prompt_tokens": 3, "completion_tokens": 4}
