"""Wrong base URLs (issue 32) against a real web process: ``/v1/v1/...`` (Claude Code with /v1 in
ANTHROPIC_BASE_URL) and the gateway's endpoints without ``/v1`` (Codex without it) answer a JSON 404 in the
right API's shape that names the fix, and each leaves a row in the request log; the console's own /models page
is still the console's."""

import time

import anthropic
import httpx
import openai
import pytest

from console.access import keys as apikeys
from console.observability.models import RequestLog

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]  # the web reads the test database
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def key(admin_user: object) -> str:
    return apikeys.create_key("wrong urls", admin_user)[1]


def rows_for(path: str, within: float = 30) -> list[RequestLog]:
    """The request log's rows of ``path``, once there is one (the gateway spools them; its writer writes them)."""
    deadline = time.monotonic() + within
    while not (rows := list(RequestLog.objects.filter(endpoint=path).select_related("api_key"))):
        assert time.monotonic() < deadline, f"no request log row for {path} within {within} s"
        time.sleep(0.2)
    return rows


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/v1/messages"), ("POST", "/v1/v1/messages/count_tokens"), ("POST", "/messages")],
)
def test_a_messages_path_with_a_wrong_base_url_is_anthropics_400_naming_the_fix(
    web: str, key: str, method: str, path: str
) -> None:
    resp = httpx.request(method, web + path, json={"model": "m", "messages": HI}, headers={"x-api-key": key})
    # a 400: Claude Code shows its message, and turns a 404 into "There's an issue with the selected model" (a trial)
    assert resp.status_code == 400 and resp.headers["content-type"] == "application/json", resp.text
    body = resp.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    fix = "remove /v1 from ANTHROPIC_BASE_URL" if path.startswith("/v1/v1") else f"add /v1 to the base URL: {web}/v1"
    assert fix in body["error"]["message"], body
    row = rows_for(path)[0]
    assert (row.status, row.surface, row.api_key and row.api_key.name) == (400, "anthropic", "wrong urls")
    assert row.error == body["error"]["message"]  # what the developer was told, on the Requests page


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/chat/completions"),
        ("POST", "/responses"),
        ("GET", "/models"),
        ("POST", "/completions"),
        ("POST", "/v1/v1/chat/completions"),
        ("GET", "/v1/v1/models"),
        ("POST", "/files"),
        ("GET", "/batches"),
        ("GET", "/batches/batch_abc"),
        ("POST", "/v1/v1/batches"),
    ],
)
def test_an_openai_path_with_a_wrong_base_url_is_openais_404_naming_the_fix(
    web: str, key: str, method: str, path: str
) -> None:
    resp = httpx.request(method, web + path, headers={"Authorization": f"Bearer {key}"})
    assert resp.status_code == 404 and resp.headers["content-type"] == "application/json", resp.text
    error = resp.json()["error"]
    assert error["code"] == "wrong_base_url" and error["type"] == "invalid_request_error"
    fix = "remove the extra /v1" if path.startswith("/v1/v1") else "add /v1 to the base URL"
    assert f"{fix}: use {web}/v1" in error["message"], error
    row = rows_for(path)[0]
    assert (row.status, row.surface, row.api_key and row.api_key.name) == (404, "openai", "wrong urls")
    assert row.error == error["message"]


def test_the_sdks_with_a_wrong_base_url_show_their_users_the_fix(web: str, key: str) -> None:
    claude = anthropic.Anthropic(base_url=f"{web}/v1", api_key=key, max_retries=0, timeout=30)
    with pytest.raises(anthropic.BadRequestError, match="remove /v1 from ANTHROPIC_BASE_URL"):
        claude.messages.create(model="m", max_tokens=5, messages=HI)  # type: ignore[arg-type]
    codex_like = openai.OpenAI(base_url=web, api_key=key, max_retries=0, timeout=30)
    with pytest.raises(openai.NotFoundError, match="add /v1 to the base URL"):
        codex_like.responses.create(model="m", input="Hi")
    with pytest.raises(openai.NotFoundError, match="add /v1 to the base URL"):
        codex_like.batches.list()


def test_a_wrong_url_without_a_key_is_the_gateways_json_401_and_the_console_keeps_its_pages(web: str) -> None:
    resp = httpx.post(f"{web}/chat/completions", json={"model": "m", "messages": HI})
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "missing_api_key", resp.text
    for console in ("/models", "/batches", "/files"):  # a browser: the console's pages (or its HTML 404)
        page = httpx.get(f"{web}{console}")
        assert "application/json" not in page.headers.get("content-type", ""), (console, page.text)
    # no row of its own (the earlier tests' rows may still be arriving from the spool: only a 401's would be this one)
    assert not RequestLog.objects.filter(endpoint="/chat/completions", status=401).exists()
