"""What the web server answers before the gateway's routes (issue 36): every spelling of a path under /v1 reaches
the gateway and answers its JSON, never the console's HTML 404; a request uvicorn's parser refuses (the app never
sees it) gets a JSON 400 in the API's shape (appliance.http_protocol), not uvicorn's text/plain one."""

import json
import socket

import httpx
import pytest

from console.access import keys as apikeys

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]  # the web reads the test database


def raw(base: str, request: bytes) -> tuple[bytes, bytes]:
    """``request`` sent as it is; the answer's head and body, read until the server closes (as after a 400)."""
    host, port = base.removeprefix("http://").split(":")
    answer = b""
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        while part := sock.recv(65536):
            answer += part
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, body


@pytest.mark.parametrize("path", ["//v1/models", "/V1/models", "/v1.json", "/v1;x", "/v1%00", "/v1/nothing/here"])
def test_every_spelling_of_a_path_under_v1_answers_the_gateways_json(web: str, path: str) -> None:
    resp = httpx.get(web + path, headers={"Authorization": "Bearer hk-nothing.x"})
    assert resp.status_code == 401 and resp.headers["content-type"] == "application/json", resp.text
    assert resp.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(
    ("path", "anthropic"),
    [("//v1/models", False), ("/v1.json", False), ("/v1/fine_tuning/jobs", False), ("/v1/messages/batches", True)],
)
def test_an_unknown_path_under_v1_is_a_json_404_in_its_apis_shape(
    web: str, admin_user: object, path: str, anthropic: bool
) -> None:
    key = apikeys.create_key("edges", admin_user)[1]
    resp = httpx.get(web + path, headers={"x-api-key": key})
    assert resp.status_code == 404 and resp.headers["content-type"] == "application/json", resp.text
    if anthropic:
        assert resp.json()["type"] == "error" and resp.json()["error"]["type"] == "not_found_error"
    else:
        assert resp.json()["error"]["code"] == "unknown_url"


@pytest.mark.parametrize(
    "request_",
    [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n",
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX A: b\r\n\r\n",
        "GET /v1/mödels HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
        b"GET /login/ HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    ],
    ids=[
        "bad-length",
        "two-lengths",
        "length-and-chunked",
        "control-character",
        "space-in-name",
        "utf8-path",
        "console",
    ],
)
def test_a_request_uvicorns_parser_refuses_gets_a_json_400(web: str, request_: bytes) -> None:
    head, body = raw(web, request_)
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head.lower(), head
    error = json.loads(body)["error"]
    assert "not valid HTTP" in error["message"]
    assert (json.loads(body).get("type") == "error") == (b"/v1/messages" in request_)
