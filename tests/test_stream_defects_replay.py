"""Engine output that broke the gateway's answers (issue 32), replayed byte for byte by an endpoint registered as a
user registers one (an external vLLM of unknown version: chat completions are relayed, Messages and Responses
translated), and read by the real SDKs: parallel tool calls whose argument pieces interleave, a 200 whose body is an
error, SSE lines without data and an event whose data spans two lines, vLLM's flat error object mid-stream, and
message_start's usage. The replayed streams are in tests/data/streams (README.md there says where each comes from).
"""

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from django.test import Client
from django.utils import timezone

from console.access import keys as apikeys
from console.access.key_format import key_prefix
from console.observability.models import RequestLog
from gateway.engine_messages import ENGINE_LOG
from tests.conftest import ROOT

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]
STREAMS = ROOT / "tests" / "data" / "streams"
MODEL = "scripted"
ASK = [{"role": "user", "content": "Name three colours."}]
SSE, JSON = "text/event-stream", "application/json"


class Scripted(http.server.ThreadingHTTPServer):
    """An OpenAI-compatible endpoint of one model: its /v1/models, vLLM's /version when ``version`` is set, and every
    POST answered with ``answer`` (status, content type, the bytes of a file of tests/data/streams) as it is, the
    connection closed after it. ``asked`` holds the JSON bodies it was sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Replay)
        self.answer: tuple[int, str, bytes] = (404, JSON, b"{}")
        self.asked: list[dict[str, Any]] = []
        self.version = ""
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def replay(self, name: str, status: int = 200) -> None:
        self.answer = (status, SSE if name.endswith(".sse") else JSON, (STREAMS / name).read_bytes())


class _Replay(http.server.BaseHTTPRequestHandler):
    server: Scripted

    def do_GET(self) -> None:
        if self.path == "/version" and self.server.version:
            self._send(200, JSON, json.dumps({"version": self.server.version}).encode())
            return
        found = self.path == "/v1/models"
        self._send(200 if found else 404, JSON, json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode())

    def do_POST(self) -> None:
        self.server.asked.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self._send(*self.server.answer)

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def engine() -> Iterator[Scripted]:
    server = Scripted()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def registered(admin: Client, admin_user: object, engine: Scripted) -> str:
    """``engine`` registered as an external vLLM serving MODEL; a Hearth key for it."""
    body = {"base_url": engine.url, "engine_kind": "vllm", "api_key": ""}
    resp = admin.post("/api/external-deployments", body, content_type="application/json")
    assert resp.status_code == 201, resp.json()
    return apikeys.create_key("replay", admin_user)[1]


@pytest.fixture
def key(web: str, admin: Client, admin_user: object, engine: Scripted) -> str:
    """A key for MODEL on an engine of unknown version: Messages and Responses are translated to chat."""
    return registered(admin, admin_user, engine)


def chat_sdk(web: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0, timeout=30)


def claude_sdk(web: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=web, api_key=key, max_retries=0, timeout=30)


def chat_text(sdk: openai.OpenAI) -> str:
    """The text of a streamed chat completion, read by the openai SDK."""
    chunks: list[Any] = list(sdk.chat.completions.create(model=MODEL, messages=ASK, stream=True))  # type: ignore[arg-type]
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def logged(key: str, count: int, within: float = 15) -> list[RequestLog]:
    """The first ``count`` request log rows of ``key``, oldest first, once there are that many (a row of the test
    before, written after its tables were emptied, is not one of them)."""
    deadline = time.monotonic() + within
    rows = RequestLog.objects.filter(key_prefix=key_prefix(key))
    while rows.count() < count:
        assert time.monotonic() < deadline, f"fewer than {count} request log rows within {within} s"
        time.sleep(0.1)
    return list(rows.order_by("created_at", "id")[:count])


def raw_events(web: str, key: str, path: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each event of a streamed answer read with plain HTTP."""
    answer = httpx.post(f"{web}{path}", json={**body, "stream": True}, headers={"x-api-key": key}, timeout=30)
    assert answer.status_code == 200, answer.text
    events = []
    for block in answer.text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            events.append((fields.get("event", ""), json.loads(fields["data"])))
    return events


READ_AND_GLOB = [
    ("Read", {"file_path": "/work/app/main.py"}),
    ("Glob", {"pattern": "**/*.py"}),
]
TOOLS = [
    {"name": "Read", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}},
    {"name": "Glob", "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}}}},
]


def test_interleaved_parallel_tool_calls_come_out_whole_on_messages(web: str, key: str, engine: Scripted) -> None:
    """Pieces of calls 0, 1, 1, 0: each tool_use block holds its own call's name and all its input."""
    engine.replay("parallel-tool-calls-interleaved.sse")
    with claude_sdk(web, key).messages.stream(model=MODEL, max_tokens=200, messages=ASK, tools=TOOLS) as stream:  # type: ignore[arg-type]
        message = stream.get_final_message()
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == READ_AND_GLOB
    assert [b.type for b in message.content] == ["tool_use", "tool_use"] and message.stop_reason == "tool_use"
    assert [b.id for b in message.content] == ["chatcmpl-tool-a1", "chatcmpl-tool-b2"]  # type: ignore[union-attr]
    [row] = logged(key, 1)
    assert row.status == 200 and not row.truncated and row.tool_call_failures == 0


def test_interleaved_parallel_tool_calls_come_out_whole_on_responses(web: str, key: str, engine: Scripted) -> None:
    engine.replay("parallel-tool-calls-interleaved.sse")
    tools = [{"type": "function", "name": t["name"], "parameters": t["input_schema"]} for t in TOOLS]
    stream = chat_sdk(web, key).responses.create(model=MODEL, input="Read", tools=tools, stream=True)  # type: ignore[arg-type]
    events: list[Any] = list(stream)
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(i.name, json.loads(i.arguments)) for i in done] == READ_AND_GLOB
    [completed] = [e.response for e in events if e.type == "response.completed"]
    assert [(i.name, json.loads(i.arguments)) for i in completed.output] == READ_AND_GLOB
    pieces: dict[int, str] = {}
    for event in events:
        if event.type == "response.function_call_arguments.delta":
            pieces[event.output_index] = pieces.get(event.output_index, "") + event.delta
    assert [json.loads(pieces[i]) for i in sorted(pieces)] == [args for _, args in READ_AND_GLOB]


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ("error-body-flat.json", 400, "maximum context length is 2048 tokens"),
        ("error-body-nested.json", 503, "The engine is overloaded"),
    ],
)
def test_an_engines_200_with_an_error_body_is_an_error_on_messages_and_responses(
    web: str, key: str, engine: Scripted, body: str, status: int, words: str
) -> None:
    """Never a successful empty message or a completed empty response (nor a chat completion without choices): the
    engine's status and words in each API's error shape, and the request log says that status."""
    engine.replay(body)
    claude, chat = claude_sdk(web, key), chat_sdk(web, key)
    asked: list[Callable[[], object]] = [
        lambda: claude.messages.create(model=MODEL, max_tokens=20, messages=ASK),  # type: ignore[arg-type]
        lambda: list(claude.messages.create(model=MODEL, max_tokens=20, messages=ASK, stream=True)),  # type: ignore[arg-type]
        lambda: chat.responses.create(model=MODEL, input="hi"),
        lambda: list(chat.responses.create(model=MODEL, input="hi", stream=True)),
        lambda: chat.chat.completions.create(model=MODEL, messages=ASK),  # type: ignore[arg-type]
    ]
    for ask in asked:
        with pytest.raises((anthropic.APIStatusError, openai.APIStatusError)) as caught:
            ask()
        error: Any = caught.value
        assert error.status_code == status and words in str(error), error
    assert [r.status for r in logged(key, 5)] == [status] * 5
    assert all(words in r.error for r in logged(key, 5))  # the request log says why


def test_lines_without_data_are_dropped_on_chat_so_the_openai_sdk_reads_the_stream(
    web: str, key: str, engine: Scripted
) -> None:
    """retry:, id:, event: alone and comments between the events: the openai SDK took each as an event with empty
    data (an id: stays set for every event after it) and failed to parse it."""
    engine.replay("lines-without-data.sse")
    assert chat_text(chat_sdk(web, key)) == "Red, green and blue."
    [row] = logged(key, 1)
    assert row.status == 200 and not row.truncated and row.finish_reason == "stop"


def test_an_event_whose_data_spans_two_lines_keeps_its_text_on_messages_and_chat(
    web: str, key: str, engine: Scripted
) -> None:
    """Legal SSE: the two data: lines join with a newline (JSON whitespace). Messages lost that text and logged an
    empty answer without TTFT; chat's log read the event as missing and the stream as cut."""
    engine.replay("data-on-two-lines.sse")
    with claude_sdk(web, key).messages.stream(model=MODEL, max_tokens=20, messages=ASK) as stream:  # type: ignore[arg-type]
        assert "".join(stream.text_stream) == "Red, green and blue."
    assert chat_text(chat_sdk(web, key)) == "Red, green and blue."
    for row in logged(key, 2):
        assert row.status == 200 and not row.truncated and not row.empty_answer, row.endpoint
        assert row.ttft_seconds is not None and row.completion_tokens == 6, row.endpoint


def test_vllms_flat_error_mid_stream_reaches_chat_and_messages_in_the_engines_words(
    web: str, key: str, engine: Scripted
) -> None:
    """``data: {"object": "error", ...}`` then ``[DONE]``: chat's client gets the in-stream error shape the openai
    SDK raises, Messages' an error event, both with the engine's message."""
    engine.replay("flat-error-mid-stream.sse")
    with pytest.raises(openai.APIError) as chat_error:
        list(chat_sdk(web, key).chat.completions.create(model=MODEL, messages=ASK, stream=True))  # type: ignore[arg-type]
    assert "CUDA out of memory" in chat_error.value.message
    with pytest.raises(anthropic.APIStatusError) as claude_error:
        with claude_sdk(web, key).messages.stream(model=MODEL, max_tokens=20, messages=ASK) as stream:  # type: ignore[arg-type]
            stream.get_final_message()
    assert "CUDA out of memory" in str(claude_error.value)
    assert all(row.truncated and "CUDA out of memory" in row.error for row in logged(key, 2))


def test_message_start_carries_the_prompt_and_cache_counts_on_a_translated_route(
    web: str, key: str, engine: Scripted
) -> None:
    """SGLang puts usage on every chunk but the first: message_start waits for it (the prompt less its cached part,
    and both cache fields). An engine that sends no usage at all: an estimate, never 0."""
    engine.replay("sglang-usage-after-first-chunk.sse")
    message = {"model": MODEL, "max_tokens": 20, "messages": ASK}
    events = raw_events(web, key, "/v1/messages", message)
    assert events[0][0] == "message_start"
    usage = events[0][1]["message"]["usage"]
    assert usage == {
        "input_tokens": 176,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 1024,
        "output_tokens": 0,
    }
    assert engine.asked[-1]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    engine.replay("lines-without-data.sse")  # no usage anywhere
    usage = raw_events(web, key, "/v1/messages", message)[0][1]["message"]["usage"]
    assert usage["input_tokens"] > 0 and usage["cache_read_input_tokens"] == 0
    assert usage["cache_creation_input_tokens"] == 0


def test_message_start_carries_both_cache_fields_on_an_engines_own_messages_route(
    web: str, admin: Client, admin_user: object, engine: Scripted
) -> None:
    """vLLM 0.32 serves /v1/messages itself and leaves the cache fields out of message_start."""
    engine.version = "0.32.0"
    key = registered(admin, admin_user, engine)
    engine.replay("vllm-native-messages.sse")
    events = raw_events(web, key, "/v1/messages", {"model": MODEL, "max_tokens": 20, "messages": ASK})
    assert "stream_options" not in engine.asked[-1]  # sent to the engine's own /v1/messages, as it was
    assert events[0][1]["message"]["usage"] == {
        "input_tokens": 23,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert [e[0] for e in events[1:]] == [
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


def test_an_engine_killed_mid_answer_is_an_error_its_clients_can_act_on_through_chat_and_its_own_messages(
    web: str, admin: Client, admin_user: object, engine: Scripted
) -> None:
    """vLLM 0.32 whose EngineCore was killed mid-answer (captured): chat's error names the engine's log and no
    [DONE] follows it; the engine's own /v1/messages error reaches the anthropic SDK as api_error in a sentence."""
    engine.version = "0.32.0"
    key, began = registered(admin, admin_user, engine), timezone.now()  # an earlier test's last row may come late
    engine.replay("vllm-engine-core-killed-chat.sse")
    body = {"model": MODEL, "messages": ASK, "stream": True}
    raw = httpx.post(f"{web}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}, timeout=30)
    assert raw.status_code == 200 and "EngineCore encountered an issue" in raw.text and "[DONE]" not in raw.text
    with pytest.raises(openai.APIError) as chat_error:
        list(chat_sdk(web, key).chat.completions.create(model=MODEL, messages=ASK, stream=True))  # type: ignore[arg-type]
    assert chat_error.value.message == f"EngineCore encountered an issue. {ENGINE_LOG}"
    engine.replay("vllm-engine-core-killed-messages.sse")
    with pytest.raises(anthropic.APIStatusError) as claude_error:
        with claude_sdk(web, key).messages.stream(model=MODEL, max_tokens=20, messages=ASK) as stream:  # type: ignore[arg-type]
            stream.get_final_message()
    error = claude_error.value.body["error"]  # type: ignore[index]
    assert error["type"] == "api_error" and error["message"].startswith("The engine failed during the answer")
    deadline = time.monotonic() + 15
    while len(rows := list(RequestLog.objects.filter(created_at__gte=began).order_by("created_at", "id"))) < 3:
        assert time.monotonic() < deadline, rows
        time.sleep(0.1)
    assert all(row.truncated for row in rows) and rows[2].error == error["message"]
