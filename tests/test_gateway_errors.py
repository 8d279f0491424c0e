"""The gateway's refusals over real HTTP, in OpenAI's error shape: no key, wrong key, unknown model."""

import httpx
import pytest

from console.access import keys as apikeys
from console.access.models import ApiKey
from console.catalog.models import ModelSource
from console.deployments import admin_actions
from console.fanout import bump_routing_version
from tests.conftest import serving

pytestmark = pytest.mark.django_db(transaction=True)
CHAT = {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}
MESSAGE = {"model": "nope", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


def assert_openai_error(resp: httpx.Response, status: int, code: str) -> None:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/json"
    error = resp.json()["error"]
    assert set(error) >= {"message", "type", "code"}
    assert error["code"] == code and error["message"]


@pytest.fixture
def key(admin_user: object) -> str:
    return apikeys.create_key("tests", admin_user)[1]


def test_no_key_is_401(web: str) -> None:
    assert_openai_error(httpx.post(f"{web}/v1/chat/completions", json=CHAT), 401, "missing_api_key")


def test_a_wrong_key_is_401(web: str, key: str) -> None:
    wrong = key[:-4] + "AAAA"
    resp = httpx.post(f"{web}/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {wrong}"})
    assert_openai_error(resp, 401, "invalid_api_key")


def test_an_unknown_model_is_404_with_bearer_and_with_x_api_key(web: str, key: str) -> None:
    for headers in ({"Authorization": f"Bearer {key}"}, {"x-api-key": key}):
        resp = httpx.post(f"{web}/v1/chat/completions", json=CHAT, headers=headers)
        assert_openai_error(resp, 404, "model_not_found")


def test_a_revoked_key_is_refused_at_once(web: str, key: str) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    assert httpx.get(f"{web}/v1/models", headers=headers).status_code == 200
    apikeys.revoke_key(ApiKey.objects.get())
    resp = httpx.get(f"{web}/v1/models", headers=headers)
    assert_openai_error(resp, 401, "invalid_api_key")
    at = ApiKey.objects.get().revoked_at
    assert at is not None
    said = f"This API key was revoked at {at:%Y-%m-%d %H:%M:%S} UTC; ask for a new one."
    assert resp.json()["error"]["message"] == said
    wrong = key[:-4] + ("aaaa" if not key.endswith("aaaa") else "bbbb")  # its prefix, not its secret
    resp = httpx.get(f"{web}/v1/models", headers={"Authorization": f"Bearer {wrong}"})
    assert resp.json()["error"]["message"] == "Incorrect API key provided."  # nothing said of a key not held
    # no retry can pass: Claude Code retried a 401 without it for over a minute before saying anything (a trial)
    assert resp.headers["x-should-retry"] == "false"


def test_a_deployment_that_is_not_launched_is_503_which_the_sdks_do_not_retry(web: str, key: str) -> None:
    model = ModelSource.objects.create(
        name="m",
        kind="local",
        path="/x",
        weights_bytes=1,
        config={"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8, "max_position_embeddings": 64},
    )
    admin_actions.create_deployment(name="d", model=model, engine="vllm-cpu", max_model_len=64)
    bump_routing_version()
    resp = httpx.post(
        f"{web}/v1/chat/completions", json={**CHAT, "model": "d"}, headers={"Authorization": f"Bearer {key}"}
    )
    assert_openai_error(resp, 503, "no_ready_replica")
    assert "only an admin can launch it." in resp.json()["error"]["message"]
    assert resp.headers["x-should-retry"] == "false" and "retry-after" not in resp.headers  # the SDKs do not retry

    resp = httpx.post(
        f"{web}/v1/chat/completions", json={**CHAT, "model": "D"}, headers={"Authorization": f"Bearer {key}"}
    )
    assert_openai_error(resp, 404, "model_not_found")
    assert "Model names are case-sensitive: did you mean 'd'?" in resp.json()["error"]["message"]
    resp = httpx.post(f"{web}/v1/messages", json={**MESSAGE, "model": "d"}, headers={"x-api-key": key})
    assert resp.status_code == 503 and resp.headers["x-should-retry"] == "false"
    assert resp.json()["error"]["type"] == "api_error"  # not overloaded_error, which reads as a wait


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [(b"{not json", 400, None), (b'{"messages": []}', 400, None)],
    ids=["not-json", "no-model"],
)
def test_bad_bodies_are_400(web: str, key: str, body: bytes, status: int, code: str | None) -> None:
    resp = httpx.post(f"{web}/v1/chat/completions", content=body, headers={"Authorization": f"Bearer {key}"})
    assert resp.status_code == status
    assert resp.json()["error"]["type"] == "invalid_request_error"


def test_an_unknown_endpoint_is_404_in_openai_shape(web: str, key: str) -> None:
    resp = httpx.get(f"{web}/v1/nothing", headers={"Authorization": f"Bearer {key}"})
    assert_openai_error(resp, 404, "unknown_url")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/v1/chat/completions", "POST"),
        ("GET", "/v1/messages", "POST"),
        ("POST", "/v1/models", "GET"),
        ("DELETE", "/v1/models/d", "GET"),
    ],
)
def test_a_known_endpoint_asked_with_another_method_is_405_saying_which(
    web: str, key: str, method: str, path: str, allow: str
) -> None:
    resp = httpx.request(method, f"{web}{path}", headers={"Authorization": f"Bearer {key}"})
    assert (resp.status_code, resp.headers["allow"]) == (405, allow)
    assert resp.json()["error"]["message"] == f"{path} takes {allow}, not {method}."
    if path.startswith("/v1/messages"):
        assert resp.json()["error"]["type"] == "invalid_request_error" and resp.json()["type"] == "error"
    else:
        assert resp.json()["error"]["code"] == "method_not_allowed"


def test_anthropic_endpoints_answer_in_anthropics_error_shape(web: str, key: str) -> None:
    resp = httpx.post(f"{web}/v1/messages", json=MESSAGE, headers={"anthropic-version": "2023-06-01"})
    assert resp.status_code == 401
    assert resp.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": resp.json()["error"]["message"]},
    }
    resp = httpx.post(f"{web}/v1/messages/count_tokens", json=MESSAGE, headers={"x-api-key": key})
    assert resp.status_code == 404 and resp.json()["error"]["type"] == "not_found_error"


def test_the_anthropic_sdk_sees_typed_errors(web: str, key: str) -> None:
    import anthropic

    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=web, api_key="hk-wrong.key").messages.create(**MESSAGE)  # type: ignore[call-overload]
    with pytest.raises(anthropic.NotFoundError):
        anthropic.Anthropic(base_url=web, api_key=key).messages.create(**MESSAGE)  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("stream_options", "x", "an object"),
        ("stream", "yes", "true or false"),
        ("max_tokens", "x", "an integer"),
        ("max_completion_tokens", True, "an integer"),
    ],
)
def test_a_field_the_gateway_reads_with_the_wrong_type_is_400(
    web: str, key: str, field: str, value: object, words: str
) -> None:
    resp = httpx.post(
        f"{web}/v1/chat/completions", json={**CHAT, field: value}, headers={"Authorization": f"Bearer {key}"}
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["message"] == f"'{field}' must be {words}." and resp.json()["error"]["param"] == field


def test_a_key_limited_to_some_models_gets_403_for_any_other_whatever_its_state(web: str, admin_user: object) -> None:
    serving("only-this")
    limited = apikeys.create_key("limited", admin_user, allowed_models=["only-this"])[1]
    for model in ("nope", "only-this-not"):
        resp = httpx.post(
            f"{web}/v1/chat/completions", json={**CHAT, "model": model}, headers={"Authorization": f"Bearer {limited}"}
        )
        assert resp.status_code == 403, resp.text
