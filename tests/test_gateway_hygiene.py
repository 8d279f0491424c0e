"""What of an engine's answer reaches a client when it is not a good one (gateway.engine_messages, gateway.relay):
an error's text without what looks like a secret or a traceback and at most 500 characters, the whole of it in
the log under the reference the client is given, on both surfaces, streamed or not; a redirect and a whole answer
that is not JSON are 502s in the API's shape."""

import json
import logging
import re

import pytest

from gateway.engine_messages import ENGINE_LOG, MAX_CHARS, StreamScrubber, clean
from gateway.errors import GatewayError, Surface, engine_error
from gateway.rewrite import Translation
from gateway.sse import StreamKind
from gateway.upstream import Engines
from tests.conftest import ROOT
from tests.test_gateway_exchange import TEXT, Client, answer, exchange, relayed, route, run, stream
from tests.test_gateway_upstream import Server

SECRET = "hunter2-Zx81"  # a fake database password an engine's traceback gives away
KEY = "hk-AbCdEfGh.q1w2e3r4t5y6u7i8o9p0a1s2d3f4g5h6j7k8l9"
TRACEBACK = (
    "Internal error: connecting to the cache failed\n"
    "Traceback (most recent call last):\n"
    '  File "/srv/engine/cache.py", line 41, in connect\n'
    f"    client = Redis.from_url('redis://cache:{SECRET}@10.0.0.7/0')\n"
    f"ConnectionError: password={SECRET} refused"
)
REF = re.compile(r"\[(?:removed|cut): ref ([0-9a-f]{8}) in the web log\]")


def logged_under(ref: str, caplog: pytest.LogCaptureFixture) -> str:
    """The log line that holds the whole text given the client as ``ref``."""
    [line] = [r.getMessage() for r in caplog.records if f"(ref {ref})" in r.getMessage()]
    return line


@pytest.mark.parametrize(
    "text",
    [
        f"password={SECRET}",
        f"could not connect: 'api_key': '{SECRET}'",
        f"upstream said Authorization: Bearer {SECRET}",
        f"Authorization: Basic {SECRET}",
        f"key {KEY} is not valid",
        f"postgres://hearth:{SECRET}@db:5432/hearth is down",
        "token a8F3kQ9zL2mN7pR4sT6vW1xY5bC0dE3gH8jK",
        "sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        TRACEBACK,
    ],
)
def test_what_looks_like_a_secret_or_a_traceback_is_replaced_by_a_reference_to_the_log(
    text: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "gateway.engine_messages"):
        shown = clean(text, "An engine's HTTP 500 answer")
    assert SECRET not in shown and KEY not in shown and "a8F3kQ9z" not in shown and "9f86d081" not in shown
    assert "Traceback" not in shown and "cache.py" not in shown
    [ref] = set(REF.findall(shown))
    assert repr(text) in logged_under(ref, caplog)  # the admin finds the whole text under the reference


@pytest.mark.parametrize(
    "text",
    [
        "This model's maximum context length is 8192 tokens. However, you requested 44308 tokens (12308 in the "
        "messages, 32000 in the completion). Please reduce the length of the messages or completion.",
        "max_tokens must be at least 1, got 0.",
        "prompt_tokens: 12 is over the key's limit",
        "The model `Qwen/Qwen2.5-0.5B-Instruct` does not exist.",
        "CUDA error: an illegal memory access was encountered",
    ],
)
def test_an_ordinary_message_is_passed_on_as_it_is_and_nothing_logged(
    text: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "gateway.engine_messages"):
        assert clean(text, "An engine's HTTP 400 answer") == text
    assert not caplog.records


def test_a_long_message_is_cut_to_500_characters_with_a_reference(caplog: pytest.LogCaptureFixture) -> None:
    text = "The engine is overloaded; " * 100
    with caplog.at_level(logging.WARNING, "gateway.engine_messages"):
        shown = clean(text, "An engine's HTTP 503 answer")
    assert len(shown) <= MAX_CHARS and shown.startswith("The engine is overloaded;")
    [ref] = REF.findall(shown)
    assert repr(text) in logged_under(ref, caplog)


@pytest.mark.parametrize("surface", [Surface.OPENAI, Surface.ANTHROPIC])
@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"error": {"message": TRACEBACK, "type": "InternalServerError", "param": SECRET}}),
        json.dumps({"detail": TRACEBACK}),
        TRACEBACK,
    ],
    ids=["openai", "fastapi", "plain"],
)
def test_an_error_body_is_reshaped_without_its_secret(surface: Surface, body: str) -> None:
    shaped = engine_error(500, body.encode()).body(surface)
    assert SECRET not in shaped.decode() and "Traceback" not in shaped.decode()
    error = json.loads(shaped)["error"]
    assert error["message"].startswith("Internal error: connecting to the cache failed") and REF.search(
        error["message"]
    )
    if surface == Surface.OPENAI:
        assert error["type"] == "server_error" and error["param"] is None  # only a request field's name passes
        named = {"error": {"message": "bad", "param": "messages[0].content"}}
        assert (
            json.loads(engine_error(400, json.dumps(named).encode()).body(surface))["error"]["param"]
            == "messages[0].content"
        )


def test_a_stream_is_passed_on_in_whole_events_its_error_events_cleaned() -> None:
    scrubber = StreamScrubber("The engine serving 'm'")
    assert scrubber.feed(TEXT) is TEXT  # a whole event without an error: the same bytes, no copy
    error = json.dumps({"error": {"message": f"boom password={SECRET}", "code": 500}}).encode()
    assert scrubber.feed(b"data: " + error[:20]) == b""  # held until the event is whole
    out = scrubber.feed(error[20:] + b"\n\ndata: [DONE]\n\n")
    assert SECRET.encode() not in out and out.endswith(b"\n\ndata: [DONE]\n\n")
    assert json.loads(out.split(b"\n")[0][5:])["error"]["message"].startswith("boom [removed: ref")
    anthropic = json.dumps({"type": "error", "error": {"type": "api_error", "message": TRACEBACK}}).encode()
    responses = json.dumps({"type": "response.failed", "response": {"error": {"message": TRACEBACK}}}).encode()
    for event in (b"event: error\ndata: " + anthropic, b"event: response.failed\ndata: " + responses):
        assert SECRET.encode() not in scrubber.feed(event + b"\n\n")
    assert scrubber.feed(b"data: " + error) == b"" and SECRET.encode() not in scrubber.flush()


SECRET_500 = json.dumps({"error": {"message": TRACEBACK, "type": "InternalServerError", "code": 500}}).encode()


@pytest.mark.parametrize("content_type", [b"application/json", b"text/event-stream"])
@pytest.mark.parametrize(
    ("surface", "kind", "translation"),
    [
        (Surface.OPENAI, StreamKind.CHAT, Translation.NONE),
        (Surface.ANTHROPIC, StreamKind.MESSAGES, Translation.NONE),
        (Surface.ANTHROPIC, StreamKind.CHAT, Translation.MESSAGES),
    ],
    ids=["openai", "anthropic", "anthropic-translated"],
)
def test_an_upstream_500_with_a_secret_reaches_the_client_without_it(
    content_type: bytes, surface: Surface, kind: StreamKind, translation: Translation
) -> None:
    """The relay of a streamed request (``exchange`` asks for a stream) to an engine answering 500, with a JSON
    body or (wrongly) an event stream's content type: a JSON error in the client's API, the secret gone."""
    client = Client()

    async def test() -> None:
        async with Server(answer(500, content_type, SECRET_500)) as engine:
            await exchange(Engines(1, 5), route(engine.url), surface, kind, translation).run(client)

    run(test)
    assert client.status == 500 and client.headers[b"content-type"] == b"application/json"
    assert SECRET not in client.body.decode() and "Traceback" not in client.body.decode()
    body = json.loads(client.body)
    assert (body.get("type") == "error") == (surface == Surface.ANTHROPIC) and REF.search(body["error"]["message"])


ENGINE_ERROR = json.dumps({"error": {"message": TRACEBACK, "code": 500}}).encode()


@pytest.mark.parametrize(
    ("surface", "translation"),
    [(Surface.OPENAI, Translation.NONE), (Surface.ANTHROPIC, Translation.MESSAGES)],
    ids=["passed-on", "translated"],
)
def test_an_error_event_in_a_stream_reaches_the_client_without_its_secret(
    surface: Surface, translation: Translation, caplog: pytest.LogCaptureFixture
) -> None:
    """The request log's error is what the client was told, under the one reference the web log has."""
    relay, body = relayed(stream(TEXT, b"data: " + ENGINE_ERROR + b"\n\n"), surface, translation)
    assert relay.state.truncated and SECRET not in body and "Traceback" not in body
    assert "Internal error: connecting to the cache failed" in body and REF.search(body)
    [ref] = set(REF.findall(body))
    assert SECRET in logged_under(ref, caplog) and ref in relay.state.error and SECRET not in relay.state.error
    assert len([r for r in caplog.records if "(ref " in r.getMessage()]) == 1


@pytest.mark.parametrize("status", [301, 302, 307, 308])
@pytest.mark.parametrize("surface", [Surface.OPENAI, Surface.ANTHROPIC])
def test_a_redirect_is_a_502_in_the_apis_shape_never_relayed(status: int, surface: Surface) -> None:
    async def test() -> None:
        async with Server(answer(status, b"text/plain", b"moved")) as engine:
            with pytest.raises(GatewayError) as caught:
                await exchange(Engines(1, 5), route(engine.url), surface).run(Client())
        error = caught.value
        assert (error.status, error.code) == (502, "upstream_redirect") and f"HTTP {status}" in error.message
        assert json.loads(error.body(surface))["error"]["message"] == error.message

    run(test)


@pytest.mark.parametrize("body", [b"<html>a login page</html>", b"[1, 2]", b""])
def test_a_whole_answer_that_is_not_a_json_object_is_a_502(body: bytes) -> None:
    async def test() -> None:
        async with Server(answer(200, b"text/html", body)) as engine:
            with pytest.raises(GatewayError) as caught:
                await exchange(Engines(1, 5), route(engine.url)).run(Client())
        assert (caught.value.status, caught.value.code) == (502, "upstream_not_json")

    run(test)


def test_an_engine_that_died_mid_answer_is_said_so_the_client_can_act_on_it() -> None:
    """vLLM 0.32's own streams when its EngineCore was killed mid-answer (tests/data/streams/README.md): chat's error
    points at the engine's log instead of a stack trace "above" and no [DONE] follows it; its own /v1/messages'
    pydantic text becomes a sentence, with Anthropic's api_error for its "internal_error"."""
    streams = ROOT / "tests" / "data" / "streams"
    chat = (streams / "vllm-engine-core-killed-chat.sse").read_bytes()
    scrubber = StreamScrubber("The engine serving 'm'", chat=True)
    out = b"".join(scrubber.feed(chat[at : at + 7]) for at in range(0, len(chat), 7)) + scrubber.flush()
    events = [json.loads(e[5:]) for e in out.strip().split(b"\n\n")]
    assert events[-1]["error"]["message"] == f"EngineCore encountered an issue. {ENGINE_LOG}"
    assert b"[DONE]" not in out and out.endswith(b"\n\n") and len(events) == chat.count(b"\n\n") - 1
    messages = (streams / "vllm-engine-core-killed-messages.sse").read_bytes()
    scrubber = StreamScrubber("The engine serving 'm'", messages=True)
    out = scrubber.feed(messages) + scrubber.flush()
    assert out.startswith(messages[: messages.index(b"event: error")])  # every event before it as it came
    error = json.loads(out.split(b"event: error\ndata: ")[1])["error"]
    assert error["type"] == "api_error" and "validation error" not in error["message"]
    assert error["message"].startswith("The engine failed during the answer") and ENGINE_LOG in error["message"]


def test_an_engines_error_event_has_the_type_and_code_of_the_same_failure_in_a_whole_answer() -> None:
    """vLLM's in-stream error names its exception class and HTTP status (trial: ``"type": "InternalServerError",
    "code": 500`` in a stream, ``"type": "server_error", "code": null`` answered whole)."""
    streams = ROOT / "tests" / "data" / "streams"
    chat = (streams / "vllm-engine-core-killed-chat.sse").read_bytes()
    out = StreamScrubber("The engine serving 'm'", chat=True).feed(chat)
    error = json.loads(out.strip().split(b"\n\n")[-1][5:])["error"]
    assert (error["type"], error["code"]) == ("server_error", None)
    whole = json.loads(engine_error(500, json.dumps({"error": error}).encode()).body(Surface.OPENAI))["error"]
    assert (whole["type"], whole["code"]) == (error["type"], error["code"])
    refused = {"error": {"message": "bad", "type": "BadRequestError", "param": None, "code": 400}}
    event = StreamScrubber("m", chat=True).feed(b"data: " + json.dumps(refused).encode() + b"\n\n")
    assert json.loads(event[5:])["error"] == {
        "message": "bad",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
