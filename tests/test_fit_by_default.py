"""Fitting max_tokens to the context left is on for a deployment registered today (issue 32, part 3): an engine
registered as a user would register one (an external endpoint, scripted here: an 8,192-token context and a
/tokenize that counts 7 prompt tokens) gets a request asking for 32,000 output tokens through with the limit
lowered to what the context leaves, said by ``x-hearth-max-tokens-fitted`` on every API, whole and streamed; and
``/v1/models`` gives each model's context and output limit under the names clients read (gateway.model_list)."""

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from django.test import Client

from console.access import keys as apikeys
from console.deployments.models import Deployment
from console.fanout import bump_routing_version
from console.observability.models import RequestLog
from tests.test_gateway_request_defects import HI, LONG, EngineServer

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]  # the web reads the test database
LIMITS = {"max_tokens", "max_completion_tokens"}  # the chat API's, as the engine is sent them
FITTED = "8185; requested=32000; prompt=7; max_model_len=8192"
ASKED = [  # (path, the body's output-limit field, the rest of the body)
    ("/v1/chat/completions", "max_tokens", {"messages": HI}),
    ("/v1/chat/completions", "max_completion_tokens", {"messages": HI}),
    ("/v1/messages", "max_tokens", {"messages": HI}),
    ("/v1/responses", "max_output_tokens", {"input": "Say something."}),
]


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineServer]:
    server = EngineServer("counted", counts=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def models(web: str, key: str) -> list[dict[str, object]]:
    resp = httpx.get(f"{web}/v1/models", headers={"x-api-key": key}, timeout=10)
    assert resp.status_code == 200, resp.text
    data: list[dict[str, object]] = resp.json()["data"]
    return data


def listed_when(web: str, key: str, check: object = None) -> list[dict[str, object]]:
    """/v1/models once the web process routes to the engine (and, with ``check``, once it equals it)."""
    deadline = time.monotonic() + 30
    while True:
        listed = models(web, key)
        if listed and (check is None or listed == check):
            return listed
        assert time.monotonic() < deadline, listed
        time.sleep(0.2)


@pytest.fixture
def key(web: str, admin: Client, admin_user: object, engine: EngineServer) -> str:
    """A key for the engine, registered as an "other OpenAI-compatible server" with nothing said of fitting."""
    resp = admin.post(
        "/api/external-deployments", {"base_url": engine.base, "engine_kind": "openai"}, content_type="application/json"
    )
    assert resp.status_code == 201, resp.content
    secret = apikeys.create_key("fit", admin_user)[1]
    listed_when(web, secret)
    return secret


def row_of(resp: httpx.Response) -> RequestLog:
    """The answer's request log row, once the web process's spool writer wrote it."""
    deadline = time.monotonic() + 60  # seconds: a bound for a loaded box, not a target
    while (row := RequestLog.objects.filter(request_id=resp.headers["x-request-id"]).first()) is None:
        assert time.monotonic() < deadline, "no row"
        time.sleep(0.2)
    return row


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("path", "field", "rest"), ASKED, ids=["chat", "chat-completion-tokens", "messages", "responses"]
)
def test_a_new_deployment_fits_an_over_long_limit_and_every_api_says_so(
    web: str, key: str, engine: EngineServer, path: str, field: str, rest: dict[str, object], stream: bool
) -> None:
    assert Deployment.objects.get(served_model_name="counted").fit_max_tokens  # on without asking
    engine.seen.clear()
    body = {"model": "counted", field: 32000, "stream": stream, **rest}
    with httpx.stream("POST", web + path, json=body, headers={"x-api-key": key}, timeout=30) as resp:
        text = resp.read().decode()
        assert resp.status_code == 200, text
        assert resp.headers["x-hearth-max-tokens-fitted"] == FITTED
    assert row_of(resp).max_tokens_fitted == 8185  # the Requests page says so too
    limits = [{k: b[k] for k in LIMITS if k in b} for b in engine.seen if LIMITS & set(b)]  # not /tokenize's
    assert [list(limit.values()) for limit in limits] == [[8185]], engine.seen
    assert ("data:" in text) == stream


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/v1/chat/completions", "This model's maximum context length is 8192 tokens. However, your messages resulted"),
        ("/v1/messages", "prompt is too long: 9000 tokens > 8192 maximum"),
        ("/v1/completions", "This model's maximum context length is 8192 tokens. However, your prompt resulted"),
    ],
)
def test_a_prompt_that_fills_the_context_is_refused_as_too_long_not_for_its_max_tokens(
    web: str, key: str, engine: EngineServer, path: str, said: str
) -> None:
    """A trial's Claude Code (max_tokens 32,000) was told "max_tokens is 32,000, more than this model's whole
    context … ask for fewer" once its conversation filled the 8K context: no fewer could help."""
    engine.seen.clear()
    prompt = {"prompt": LONG} if path == "/v1/completions" else {"messages": [{"role": "user", "content": LONG}]}
    body = {"model": "counted", "max_tokens": 32000, **prompt}
    resp = httpx.post(web + path, json=body, headers={"x-api-key": key}, timeout=30)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["message"].startswith(said) and error["type"] == "invalid_request_error"
    if path != "/v1/messages":
        assert error["code"] == "context_length_exceeded"
    assert [b for b in engine.seen if LIMITS & set(b)] == []  # counted, then refused: the engine ran nothing
    assert row_of(resp).status == 400


def test_a_limit_that_fits_is_left_alone_and_says_nothing(web: str, key: str, engine: EngineServer) -> None:
    body = {"model": "counted", "max_tokens": 100, "messages": HI}
    resp = httpx.post(f"{web}/v1/chat/completions", json=body, headers={"x-api-key": key}, timeout=30)
    assert resp.status_code == 200, resp.text
    assert "x-hearth-max-tokens-fitted" not in resp.headers
    assert engine.seen[-1]["max_tokens"] == 100
    assert row_of(resp).max_tokens_fitted is None


def test_the_model_list_gives_the_context_and_the_output_limit_under_the_names_clients_read(
    web: str, key: str, admin_user: object, admin: Client
) -> None:
    (model,) = models(web, key)
    assert {k: model[k] for k in ("id", "object", "owned_by")} == {
        "id": "counted",
        "object": "model",
        "owned_by": "hearth",
    }
    assert (model["max_model_len"], model["context_length"], model["max_output_length"]) == (8192, 8192, 8192)
    capped_key = apikeys.create_key("capped", admin_user, max_tokens_cap=300)[1]
    assert listed_when(web, capped_key)[0]["max_output_length"] == 300  # the key's cap
    dep = Deployment.objects.get(served_model_name="counted")
    body = {"max_tokens_cap": 200, "confirm": True}  # acts at once: the gateways are told, nothing is relaunched
    changed = admin.post(f"/api/deployments/{dep.pk}/change", body, content_type="application/json")
    assert changed.status_code == 202 and changed.json()["max_tokens_cap"] == 200, changed.json()
    lowered = {**model, "max_output_length": 200}  # the deployment's cap, lower than the key's
    assert listed_when(web, capped_key, [lowered]) == [lowered]
    Deployment.objects.filter(served_model_name="counted").update(max_model_len=0)  # an engine that did not say
    bump_routing_version()
    unknown = {**model, "max_model_len": None, "context_length": None, "max_output_length": 200}
    assert listed_when(web, capped_key, [unknown]) == [unknown]
    one = httpx.get(f"{web}/v1/models/counted", headers={"x-api-key": capped_key}, timeout=10)
    assert one.status_code == 200 and json.loads(one.text) == unknown
