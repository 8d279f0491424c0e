"""Every request a key sends leaves a request-log row, also one the gateway refuses itself before an engine is chosen
(gateway.refusals): a body that is not JSON, an unknown model, a Content-Encoding it does not decode, a bad gzip
body, a field of the wrong type or missing, a wrong method, an unknown endpoint. Each row holds the key, the model
its body named, the endpoint, the status, the request's id and the error message its client got, with no tokens
and no cost; the answer is the API's
own error. A request without a key that authenticates leaves none, unless its key is genuine and refused (revoked):
that refusal's row is the key's. A client that leaves before its body is whole
leaves a cancelled row (499) and no error in the web log. Against a real web process and
tests/test_stream_defects_replay.py's engine."""

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest
from django.utils import timezone

from console.access import keys as apikeys
from console.access.models import ApiKey
from console.observability.models import RequestLog
from tests.test_gateway_request_ids import rows
from tests.test_stream_defects_replay import MODEL, engine, key

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]  # the web reads the test database
__all__ = ["engine", "key"]  # the fixtures this module takes from test_stream_defects_replay
ASK = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
CHAT = "/v1/chat/completions"

REFUSED = [
    ("not-json", "POST", CHAT, b"{not json", {}, 400, ""),
    ("unknown-model", "POST", CHAT, json.dumps({**ASK, "model": "no-such-model"}).encode(), {}, 404, "no-such-model"),
    (
        "streamed",
        "POST",
        CHAT,
        json.dumps({**ASK, "model": "no-such-model", "stream": True}).encode(),
        {},
        404,
        "no-such-model",
    ),
    ("brotli", "POST", CHAT, json.dumps(ASK).encode(), {"content-encoding": "br"}, 415, ""),
    ("bad-gzip", "POST", CHAT, b"not gzip at all", {"content-encoding": "gzip"}, 400, ""),
    ("no-model", "POST", CHAT, json.dumps({"messages": []}).encode(), {}, 400, ""),
    ("bad-field", "POST", CHAT, json.dumps({**ASK, "messages": "Hi"}).encode(), {}, 400, MODEL),  # its model named
    ("no-max-tokens", "POST", "/v1/messages", json.dumps(ASK).encode(), {}, 400, MODEL),
    ("wrong-method", "GET", CHAT, b"", {}, 405, ""),
    ("unknown-endpoint", "POST", "/v1/nothing-here", json.dumps(ASK).encode(), {}, 404, ""),
]


@pytest.mark.parametrize(("name", "method", "path", "body", "headers", "status", "model"), REFUSED)
def test_a_refused_request_of_a_key_leaves_its_row(
    web: str, key: str, name: str, method: str, path: str, body: bytes, headers: dict[str, str], status: int, model: str
) -> None:
    sent = {"x-api-key": key, "content-type": "application/json", "x-request-id": f"refused-{name}", **headers}
    answer = httpx.request(method, f"{web}{path}", content=body, headers=sent, timeout=30)
    assert answer.status_code == status, answer.text
    assert "error" in answer.json()  # the API's own error shape, not a page
    [row] = rows(client_request_id=f"refused-{name}")
    assert (row.status, row.endpoint, row.model) == (status, path, model)
    assert row.stream == (b'"stream": true' in body)  # as its body asked (trial: every refusal said not streamed)
    assert row.error == answer.json()["error"]["message"] and row.error  # why, as the client was told
    assert row.api_key_id is not None and row.prompt_tokens is None and row.cost_usd is None
    assert abs((row.created_at - timezone.now()).total_seconds()) < 3600  # its own time, not the epoch


def test_a_long_model_name_is_cut_to_the_column(web: str, key: str) -> None:
    named = {**ASK, "model": "m" * 500}
    sent = {"x-api-key": key, "x-request-id": "refused-long-model"}
    assert httpx.post(f"{web}{CHAT}", json=named, headers=sent, timeout=30).status_code == 404
    [row] = rows(client_request_id="refused-long-model")
    assert row.model == "m" * 200


def test_a_request_without_a_key_that_authenticates_leaves_no_row(web: str, key: str) -> None:
    sent = {"x-api-key": "hk-not-a-key", "x-request-id": "refused-no-key"}
    assert httpx.post(f"{web}{CHAT}", content=b"{not json", headers=sent, timeout=30).status_code == 401
    seen = {"x-api-key": key, "x-request-id": "refused-after"}  # a later row: the earlier one had time to land
    assert httpx.post(f"{web}{CHAT}", content=b"{not json", headers=seen, timeout=30).status_code == 400
    rows(client_request_id="refused-after")
    assert not RequestLog.objects.filter(client_request_id="refused-no-key").exists()


def test_a_revoked_key_s_refusal_leaves_its_row_under_that_key(web: str, key: str) -> None:
    """Only the key's holder can send its secret: someone still using a revoked key shows on the Requests page."""
    held = ApiKey.objects.get()
    apikeys.revoke_key(held)
    sent = {"x-api-key": key, "x-request-id": "refused-revoked"}
    deadline = time.monotonic() + 10
    while (answer := httpx.post(f"{web}{CHAT}", json=ASK, headers=sent, timeout=30)).status_code != 401:
        assert time.monotonic() < deadline, answer.text  # the gateway's snapshot has the revocation within seconds
        time.sleep(0.1)
    [row] = rows(client_request_id="refused-revoked")
    assert (row.status, row.api_key_id, row.endpoint) == (401, held.pk, CHAT)
    assert row.error == answer.json()["error"]["message"] and "revoked" in row.error


def test_an_unknown_model_s_404_names_the_models_the_key_can_use(web: str, key: str) -> None:
    named = {**ASK, "model": "smollm"}  # a near miss, as a tool set up by hand sends
    answer = httpx.post(f"{web}{CHAT}", json=named, headers={"x-api-key": key}, timeout=30)
    error = answer.json()["error"]
    assert answer.status_code == 404 and error["code"] == "model_not_found"
    assert error["message"].endswith(f"Models this key can use: {MODEL}.")


def test_a_client_that_leaves_before_its_body_is_whole_leaves_a_cancelled_row_and_no_error(
    web: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    address = urlsplit(web)
    head = f"POST {CHAT} HTTP/1.1\r\nHost: {address.netloc}\r\nx-api-key: {key}\r\nx-request-id: left-mid-body\r\n"
    with socket.create_connection((address.hostname, address.port)) as client:
        client.sendall(f'{head}Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"model": "'.encode())
        time.sleep(0.3)  # the web read the first piece; then the client goes
    [row] = rows(client_request_id="left-mid-body")
    assert (row.status, row.client_cancelled, row.endpoint, row.prompt_tokens, row.error) == (499, True, CHAT, None, "")
    logs = "".join(log.read_text() for log in tmp_path_factory.getbasetemp().glob("web*/web.log"))
    assert "client left before its request body was whole" in logs
    assert "Exception in ASGI application" not in logs  # was uvicorn's ERROR, with a CancelledError's traceback


def test_an_upload_cut_before_its_end_leaves_no_file(web: str, key: str) -> None:
    address, boundary = urlsplit(web), "cut"
    part = f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--{boundary}\r\n'
    part += 'Content-Disposition: form-data; name="file"; filename="cut.jsonl"\r\n\r\n{"custom_id": "a"'
    head = f"POST /v1/files HTTP/1.1\r\nHost: {address.netloc}\r\nx-api-key: {key}\r\nx-request-id: cut-upload\r\n"
    head += f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: 100000\r\n\r\n"
    with socket.create_connection((address.hostname, address.port)) as client:
        client.sendall((head + part).encode())
        time.sleep(0.3)
    [row] = rows(client_request_id="cut-upload")
    assert (row.status, row.client_cancelled) == (499, True)  # was logged a 400, for a form never finished
    listed = httpx.get(f"{web}/v1/files", headers={"x-api-key": key}, timeout=30).json()["data"]
    assert "cut.jsonl" not in [file["filename"] for file in listed]
