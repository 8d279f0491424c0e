"""An OpenAI Responses answer cut at max_output_tokens ends with ``response.incomplete``, as OpenAI's does, both when
the engine speaks Responses (vLLM says ``response.completed``: gateway.engine_messages.StreamScrubber says it again)
and when Hearth translates an engine's chat stream (gateway.responses_chat_stream). Codex reads that event to say
"Incomplete response returned, reason: max_output_tokens"; a trial saw a cut answer shown as whole."""

import json

from gateway.engine_messages import StreamScrubber
from gateway.responses_chat_stream import ChatStreamToResponses


def responses_terminal(status: str, error_field: bool = True) -> bytes:
    """A terminal event as vLLM sends it (its response has ``"error": null``), or without the field."""
    response = {"status": status, "usage": {"input_tokens": 3, "output_tokens": 2}}
    response |= {"error": None} if error_field else {}
    event = {"type": "response.completed", "sequence_number": 7, "response": response}
    return b"event: response.completed\ndata: " + json.dumps(event).encode() + b"\n\n"


def test_vllms_completed_event_for_a_cut_responses_answer_is_said_as_response_incomplete() -> None:
    delta = b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "delta": "Hi"}\n\n'
    cut = StreamScrubber("m", responses=True)
    out = (
        cut.feed(delta)
        + cut.feed(responses_terminal("incomplete")[:30])
        + cut.feed(responses_terminal("incomplete")[30:])
    )
    assert out.startswith(delta)
    head, data = out[len(delta) :].split(b"\n", 1)
    assert head == b"event: response.incomplete" and data.endswith(b"\n\n")
    event = json.loads(data[5:])
    assert event["type"] == "response.incomplete" and event["sequence_number"] == 7
    assert event["response"]["status"] == "incomplete" and event["response"]["usage"]["output_tokens"] == 2
    bare = StreamScrubber("m", responses=True).feed(delta + responses_terminal("incomplete", error_field=False))
    assert b"event: response.incomplete\n" in bare  # a read with no "error" in it is looked at too
    whole = StreamScrubber("m", responses=True)
    assert whole.feed(responses_terminal("completed")) == responses_terminal("completed")
    odd = b'event: response.completed\ndata: ["response.completed"]\n\n'  # not an event object: passed on as it came
    assert StreamScrubber("m", responses=True).feed(odd) == odd
    chat = StreamScrubber("m", chat=True)  # only a Responses stream is said so
    assert chat.feed(responses_terminal("incomplete")) == responses_terminal("incomplete")


def chat_stream(finish: str) -> bytes:
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m"}
    deltas = [{"role": "assistant", "content": ""}, {"content": "Hel"}, {"content": "lo"}]
    chunks = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({**head, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def test_a_translated_answer_cut_at_its_limit_ends_with_response_incomplete() -> None:
    for finish, kind, status in (
        ("length", "response.incomplete", "incomplete"),
        ("stop", "response.completed", "completed"),
    ):
        converter = ChatStreamToResponses({"model": "m", "max_output_tokens": 2}, "m")
        out = converter.feed(chat_stream(finish)) + converter.finish()
        last = out.strip().split(b"\n\n")[-1]
        head, data = last.split(b"\n", 1)
        event = json.loads(data[5:])
        assert (head, event["type"], event["response"]["status"]) == (f"event: {kind}".encode(), kind, status)
        assert converter.complete and event["response"]["usage"]["output_tokens"] == 2
        if finish == "length":
            assert event["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
