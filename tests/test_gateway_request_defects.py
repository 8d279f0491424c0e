"""Request-side defects of issue 32 against a real web process and engines registered as a user would register
them (external endpoints, scripted here): count_tokens on an engine without a tokenizer answers an estimate and
says so; a ``system`` role inside /v1/messages' ``messages`` is Anthropic's 400; an HTTP/1.0 client never gets a
chunked answer; a gzip or deflate body is decoded within HEARTH_MAX_BODY_BYTES, an unknown encoding refused."""

import gzip
import http.server
import json
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.test import Client

from console.access import keys as apikeys
from tests.test_gateway_http_edges import raw

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]  # the web reads the test database
HI = [{"role": "user", "content": "Say something."}]
ANSWER = {"role": "assistant", "content": "Something."}
USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
LONG = "[[a prompt of 9,000 tokens]]"


class _Engine(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible server with only /v1/models and /v1/chat/completions (whole or streamed), and
    /tokenize when its server's ``counts`` is set (7 tokens, 9,000 for a prompt holding LONG); 404
    ``{"detail": "Not Found"}`` elsewhere, as FastAPI answers. The bodies it was sent are kept in its server's
    ``seen``."""

    protocol_version = "HTTP/1.1"
    server: "EngineServer"

    def do_GET(self) -> None:
        if self.path != "/v1/models":
            return self._send(404, {"detail": "Not Found"})
        return self._send(200, {"object": "list", "data": [{"id": self.server.model, "max_model_len": 8192}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append(body)
        if self.path == "/tokenize" and self.server.counts:
            count = 9000 if LONG in json.dumps(body) else 7  # a prompt that fills the context, where one says so
            return self._send(200, {"count": count, "max_model_len": 8192, "tokens": list(range(count))})
        if self.path != "/v1/chat/completions":
            return self._send(404, {"detail": "Not Found"})
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": self.server.model}
        if not body.get("stream"):
            choice = {"index": 0, "message": ANSWER, "finish_reason": "stop"}
            return self._send(200, {**chunk, "object": "chat.completion", "choices": [choice], "usage": USAGE})
        events = [
            {**chunk, "choices": [{"index": 0, "delta": ANSWER, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**chunk, "choices": [], "usage": USAGE},
        ]
        text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return self._send(200, text.encode(), "text/event-stream")

    def _send(self, status: int, body: Any, kind: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


class EngineServer(http.server.ThreadingHTTPServer):
    def __init__(self, model: str, counts: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Engine)
        self.model, self.counts, self.seen = model, counts, list[Any]()
        self.base = f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, EngineServer]]:
    """ "plain", an engine without a tokenizer endpoint, and "counted", one with /tokenize, each in a thread."""
    servers = {"plain": EngineServer("plain", counts=False), "counted": EngineServer("counted", counts=True)}
    for server in servers.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield servers
    for server in servers.values():
        server.shutdown()
        server.server_close()


@pytest.fixture
def key(web: str, admin: Client, admin_user: object, engines: dict[str, EngineServer]) -> str:
    """A key for both engines, registered as external endpoints of the kind "other OpenAI-compatible server"
    (so /v1/messages is translated to the chat API), once the web process routes to them."""
    for server in engines.values():
        body = {"base_url": server.base, "engine_kind": "openai"}
        resp = admin.post("/api/external-deployments", body, content_type="application/json")
        assert resp.status_code == 201, resp.content
    secret = apikeys.create_key("defects", admin_user)[1]
    deadline = time.monotonic() + 30
    while True:
        listed = httpx.get(f"{web}/v1/models", headers={"x-api-key": secret}, timeout=10).json().get("data", [])
        if {m["id"] for m in listed} == set(engines):
            return secret
        assert time.monotonic() < deadline, listed
        time.sleep(0.2)


def test_count_tokens_on_an_engine_without_a_tokenizer_is_estimated_and_says_so(
    web: str, key: str, engines: dict[str, EngineServer]
) -> None:
    short = {"model": "plain", "messages": HI}
    long = {"model": "plain", "system": "Be brief. " * 50, "messages": HI}
    counts = []
    for body in (short, long):
        resp = httpx.post(f"{web}/v1/messages/count_tokens", json=body, headers={"x-api-key": key}, timeout=30)
        assert resp.status_code == 200, resp.text
        assert resp.headers["x-hearth-tokens-estimated"] == "true"
        assert list(resp.json()) == ["input_tokens"]
        counts.append(resp.json()["input_tokens"])
    assert 0 < counts[0] < counts[1]  # the system text counts
    counted = httpx.post(
        f"{web}/v1/messages/count_tokens", json={**short, "model": "counted"}, headers={"x-api-key": key}, timeout=30
    )
    assert counted.status_code == 200 and counted.json() == {"input_tokens": 7}, counted.text
    assert "x-hearth-tokens-estimated" not in counted.headers  # the engine's own count


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_a_system_role_inside_messages_joins_the_leading_system_message_when_translated(
    web: str, key: str, engines: dict[str, EngineServer], path: str
) -> None:
    """Claude Code 2.1.328 sends its environment as a system message after the user's first, on every request
    (engines/agent_requests/claude-code-2.1.328.json): refusing it would refuse every Claude Code request."""
    environment = [{"type": "text", "text": "# Environment"}]
    messages = [*HI, {"role": "system", "content": environment}, {"role": "assistant", "content": "Hello."}, *HI]
    body = {"model": "counted", "max_tokens": 20, "system": "Be brief.", "messages": messages}
    engines["counted"].seen.clear()
    resp = httpx.post(web + path, json=body, headers={"x-api-key": key}, timeout=30)
    assert resp.status_code == 200, resp.text
    sent = engines["counted"].seen[-1]["messages"]
    assert sent[0] == {"role": "system", "content": "Be brief.\n# Environment"}  # the one leading system message
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "user"]


def http_1_0(base: str, request: bytes) -> tuple[bytes, bytes]:
    """``request`` sent over a fresh connection; the answer's head (lowercased) and raw body, read until the server
    closes."""
    head, body = raw(base, request)
    return head.lower(), body


def test_an_http_1_0_client_never_gets_a_chunked_answer(web: str, key: str) -> None:
    auth = f"Authorization: Bearer {key}\r\n".encode()
    head, body = http_1_0(web, b"GET /v1/models HTTP/1.0\r\nHost: x\r\n" + auth + b"\r\n")
    assert b" 200 " in head.split(b"\r\n")[0] and b"transfer-encoding" not in head, head
    assert f"content-length: {len(body)}".encode() in head and json.loads(body)["object"] == "list"

    stream = json.dumps({"model": "plain", "stream": True, "messages": HI}).encode()
    request = b"POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n" + auth
    head, body = http_1_0(web, request + f"Content-Length: {len(stream)}\r\n\r\n".encode() + stream)
    assert b" 200 " in head.split(b"\r\n")[0] and b"transfer-encoding" not in head, head
    assert body.startswith(b"data: {") and body.endswith(b"data: [DONE]\n\n"), body  # close-delimited, no chunk sizes

    host = web.removeprefix("http://").encode()
    head, body = http_1_0(web, b"GET /login/ HTTP/1.0\r\nHost: " + host + b"\r\n\r\n")  # the console's page too
    assert b" 200 " in head.split(b"\r\n")[0] and b"transfer-encoding" not in head, head
    assert b"<form" in body and not body.endswith(b"0\r\n\r\n")


CHAT = {"model": "plain", "max_tokens": 5, "messages": HI}


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("x-gzip", gzip.compress)],
)
def test_a_compressed_body_is_decoded(
    web: str, key: str, engines: dict[str, EngineServer], encoding: str, compress: Any
) -> None:
    body = json.dumps({**CHAT, "messages": [{"role": "user", "content": encoding}]}).encode()
    headers = {"Authorization": f"Bearer {key}", "Content-Encoding": encoding, "Content-Type": "application/json"}
    resp = httpx.post(f"{web}/v1/chat/completions", content=compress(body), headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "Something."
    assert engines["plain"].seen[-1]["messages"] == [{"role": "user", "content": encoding}]


def test_a_body_that_decompresses_past_the_limit_is_413_and_is_not_decompressed_whole(web: str, key: str) -> None:
    from django.conf import settings

    bomb = gzip.compress(b" " * (settings.HEARTH_MAX_BODY_BYTES + 1024))  # ~16 KB on the wire
    headers = {"Authorization": f"Bearer {key}", "Content-Encoding": "gzip"}
    resp = httpx.post(f"{web}/v1/chat/completions", content=bomb, headers=headers, timeout=30)
    assert resp.status_code == 413, resp.text
    assert resp.json()["error"]["code"] == "request_too_large" and "decompressed" in resp.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_an_unknown_content_encoding_is_415_in_the_apis_shape(web: str, key: str, path: str) -> None:
    headers = {"x-api-key": key, "Content-Encoding": "br"}
    resp = httpx.post(web + path, content=json.dumps(CHAT).encode(), headers=headers, timeout=30)
    assert resp.status_code == 415, resp.text
    if path == "/v1/messages":
        error = resp.json()["error"]
        assert resp.json()["type"] == "error" and error["type"] == "invalid_request_error"
    else:
        error = resp.json()["error"]
        assert error["code"] == "unsupported_content_encoding"
    assert "'br'" in error["message"] and "gzip" in error["message"]


def test_a_broken_gzip_body_is_400(web: str, key: str) -> None:
    headers = {"Authorization": f"Bearer {key}", "Content-Encoding": "gzip"}
    resp = httpx.post(f"{web}/v1/chat/completions", content=gzip.compress(b'{"model": "plain"}')[:-9], headers=headers)
    assert resp.status_code == 400, resp.text
    assert "gzip" in resp.json()["error"]["message"]
