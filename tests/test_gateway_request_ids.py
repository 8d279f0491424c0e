"""x-request-id on every gateway answer (issue 33), against a real web process and an endpoint that replays a
recorded vLLM stream (tests/test_stream_defects_replay.py's Scripted): a relayed stream, a whole answer, each API's
errors, a wrong URL's 404, a 401, the probes. The client's own id is echoed when usable (gateway.request_ids) and
kept in the request log beside the gateway's unique one; an unusable one is ignored for the gateway's own."""

import re
import time
from typing import Any

import httpx
import pytest
from django.test import Client

from console.observability.models import RequestLog
from gateway.request_ids import MAX_LENGTH, request_ids, usable
from tests.test_stream_defects_replay import MODEL, Scripted, engine, key

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]  # the web reads the test database
__all__ = ["engine", "key"]  # the fixtures this module takes from test_stream_defects_replay
OURS = re.compile(r"^[0-9a-f]{32}$")
THEIRS = "trace-42/retry 1"
ASK = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        (b"trace-42/retry 1", "trace-42/retry 1"),
        (b"  padded  ", "padded"),
        (b"x" * MAX_LENGTH, "x" * MAX_LENGTH),
        (b"x" * (MAX_LENGTH + 1), None),
        (b"", None),
        (b"   ", None),
        (b"caf\xc3\xa9", None),
        (b"tab\there", None),
        (b"bell\x07", None),
    ],
)
def test_a_clients_id_is_kept_only_when_it_is_bounded_printable_ascii(sent: bytes, kept: str | None) -> None:
    assert usable(sent) == kept
    ids = request_ids([(b"host", b"h"), (b"x-request-id", sent)])
    assert OURS.match(ids.own) and ids.client == kept and ids.answered == (kept or ids.own)


def test_requests_without_an_id_each_get_a_new_one_of_the_gateways() -> None:
    first, second = request_ids([]), request_ids([(b"x-other", b"1")])
    assert first.client is None and first.answered == first.own and first.own != second.own


def _answers(web: str, key: str, headers: dict[str, str]) -> dict[str, httpx.Response]:
    """One answer of each kind the gateway gives without an engine, each sent with ``headers``."""
    bearer = {**headers, "Authorization": f"Bearer {key}"}
    return {
        "401 openai": httpx.post(f"{web}/v1/chat/completions", json=ASK, headers=headers),
        "401 anthropic": httpx.post(f"{web}/v1/messages", json=ASK, headers=headers),
        "400 bad body": httpx.post(f"{web}/v1/chat/completions", content=b"{", headers=bearer),
        "404 unknown model": httpx.post(f"{web}/v1/chat/completions", json={**ASK, "model": "none"}, headers=bearer),
        "404 unknown endpoint": httpx.get(f"{web}/v1/nothing", headers=bearer),
        "404 wrong base URL": httpx.post(f"{web}/chat/completions", json=ASK, headers=bearer),
        "405": httpx.get(f"{web}/v1/chat/completions", headers=bearer),
        "200 models": httpx.get(f"{web}/v1/models", headers=bearer),
        "health": httpx.get(f"{web}/health", headers=headers),
        "ready": httpx.get(f"{web}/ready", headers=headers),
    }


def test_every_answer_of_the_gateway_carries_its_own_id_or_the_clients(web: str, key: str) -> None:
    mine = _answers(web, key, {})
    assert {kind: bool(OURS.match(r.headers.get("x-request-id", ""))) for kind, r in mine.items()} == dict.fromkeys(
        mine, True
    )
    assert len({r.headers["x-request-id"] for r in mine.values()}) == len(mine)  # a new one each time
    theirs = _answers(web, key, {"x-request-id": THEIRS})
    assert {kind: r.headers.get("x-request-id") for kind, r in theirs.items()} == dict.fromkeys(theirs, THEIRS)
    assert all(len(r.headers.get_list("x-request-id")) == 1 for r in theirs.values())


def test_an_unusable_client_id_is_ignored_for_the_gateways_own(web: str, key: str) -> None:
    for sent in ("x" * (MAX_LENGTH + 1), b"caf\xc3\xa9"):
        answer = httpx.get(f"{web}/v1/models", headers={"Authorization": f"Bearer {key}", "x-request-id": sent})
        assert answer.status_code == 200 and OURS.match(answer.headers["x-request-id"]), answer.headers


def rows(within: float = 15, **match: object) -> list[RequestLog]:
    """The request log's rows that ``match`` (field lookups), oldest first, once there is one (rows are spooled:
    a row of an earlier test's request may be written later, so each test picks its own)."""
    deadline = time.monotonic() + within
    while not (found := list(RequestLog.objects.filter(**match).order_by("created_at", "id"))):
        assert time.monotonic() < deadline, f"no request log row {match} within {within} s"
        time.sleep(0.1)
    return found


def _chat(web: str, key: str, stream: bool, headers: dict[str, str]) -> httpx.Response:
    body: dict[str, Any] = {**ASK, "stream": stream}
    return httpx.post(f"{web}/v1/chat/completions", json=body, headers={"x-api-key": key, **headers}, timeout=30)


def test_streams_carry_the_ids_their_request_log_rows_hold(web: str, key: str, engine: Scripted, admin: Client) -> None:
    engine.replay("parallel-tool-calls-interleaved.sse")
    streamed = _chat(web, key, True, {"x-request-id": THEIRS})
    assert streamed.status_code == 200 and streamed.headers["x-request-id"] == THEIRS, streamed.text
    engine.replay("parallel-tool-calls-interleaved.sse")
    plain = _chat(web, key, True, {})
    ours = plain.headers["x-request-id"]
    assert plain.status_code == 200 and OURS.match(ours)
    [first] = rows(client_request_id=THEIRS)
    [second] = rows(request_id=ours)
    assert first.client_request_id == THEIRS and OURS.match(first.request_id or "") and first.request_id != THEIRS
    assert (second.request_id, second.client_request_id) == (ours, None)
    found = admin.get("/requests/", {"request_id": THEIRS}).content.decode()
    assert "(1 request)" in found and first.request_id in found
    assert RequestLog.objects.filter(client_request_id=THEIRS).count() == 1


def test_a_wrong_base_urls_row_keeps_the_clients_id(web: str, key: str) -> None:
    answer = httpx.post(f"{web}/completions", json=ASK, headers={"x-api-key": key, "x-request-id": "wrong-url-1"})
    assert answer.status_code == 404 and answer.headers["x-request-id"] == "wrong-url-1"
    [row] = rows(client_request_id="wrong-url-1")
    assert (row.endpoint, row.status) == ("/completions", 404) and OURS.match(row.request_id or "")
