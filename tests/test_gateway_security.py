"""The gateway's security suite: every kind of bad or forged credential against every gateway route, over
real HTTP to a real gateway process, with the status and the body in the route's API shape each time
(OpenAI's on /v1/chat/completions, /v1/models …, Anthropic's on /v1/messages …); the open probes stay
open; /metrics needs its token.

The routes come from gateway.app (POST_ROUTES and GET_ROUTES), so a new route is in the table the day it
is added. Each case says what it sends and what each kind of route answers. A budget-exhausted key needs a
ready deployment to be judged against (its price): tests/test_gateway_budgets.py sends it to every POST route.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from console.access import keys as apikeys
from console.access.key_format import new_key
from console.access.models import ApiKey
from console.fanout import bump_routing_version
from gateway.app import GET_ROUTES, POST_ROUTES
from gateway.errors import ANTHROPIC_TYPES, Surface
from gateway.request_body import FOREIGN
from tests.conftest import serving
from tests.gatewayworld import gateway_processes

pytestmark = pytest.mark.django_db(transaction=True)
METRICS_TOKEN = "metrics-token-for-the-security-suite"
FORBIDDEN = "secret-model"  # a model the restricted key may not use
BODY = {"messages": [{"role": "user", "content": "hi"}], "prompt": "hi", "input": "hi", "max_tokens": 5}


def body_for(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without the other APIs' fields ``path`` refuses (gateway.request_body.FOREIGN: a chat's messages on
    /v1/completions or /v1/responses), so one body serves every POST route."""
    foreign = {name for name, _ in FOREIGN.get(path, ())}
    return {name: value for name, value in body.items() if name not in foreign}


@pytest.fixture(scope="module")
def gateway(live_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One gateway process with HEARTH_METRICS_TOKEN set."""
    env = {**live_env, "HEARTH_METRICS_TOKEN": METRICS_TOKEN}
    with gateway_processes(1, env, tmp_path_factory.mktemp("security")) as (base,):
        yield base


@dataclass
class Keys:
    """One key of each kind, as their holders (or forgers) would send them."""

    good: str
    good_id: int
    restricted: str  # may use only the model "other"
    revoked: str
    expired: str
    rotated_out: str  # the secret before a rotation without grace
    unknown: str  # well formed, never issued


@pytest.fixture
def keys(admin_user: object) -> Keys:
    good_row, good = apikeys.create_key("good", admin_user)
    serving("other")
    _, restricted = apikeys.create_key("restricted", admin_user, allowed_models=["other"])
    revoked_row, revoked = apikeys.create_key("revoked", admin_user)
    apikeys.revoke_key(revoked_row, admin_user)
    expired_row, expired = apikeys.create_key("expired", admin_user)
    ApiKey.objects.filter(pk=expired_row.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    bump_routing_version()
    rotated_row, rotated_out = apikeys.create_key("rotated", admin_user)
    apikeys.rotate_key(rotated_row, admin_user, grace_seconds=0)
    return Keys(good, good_row.pk, restricted, revoked, expired, rotated_out, new_key()[0])


@dataclass(frozen=True)
class Expect:
    status: int
    code: str | None  # OpenAI's error code (Anthropic's error type follows from the status)
    says: str = ""  # words the message must hold


@dataclass(frozen=True)
class Case:
    """What a request sends, and what a POST route, GET /v1/models and GET /v1/models/{model} answer."""

    headers: Callable[[Keys], dict[str, str]]
    post: Expect
    listing: Expect
    show: Expect
    model: str = FORBIDDEN


MISSING = Expect(401, "missing_api_key")
INVALID = Expect(401, "invalid_api_key")
FORGED = {"x-hearth-key-id": "1", "x-forwarded-user": "admin", "x-remote-user": "admin", "x-hearth-role": "admin"}


def all_three(expect: Expect) -> tuple[Expect, Expect, Expect]:
    return expect, expect, expect


# a key that may not use the model: refused it by name on POST, shown no trace of it on GET
RESTRICTED = (Expect(403, "model_not_allowed", FORBIDDEN), Expect(200, None), Expect(404, "model_not_found"))
CASES = {
    "missing": Case(lambda k: {}, *all_three(MISSING)),
    "empty-bearer": Case(lambda k: {"Authorization": "Bearer"}, *all_three(MISSING)),
    "malformed-scheme": Case(lambda k: {"Authorization": f"Basic {k.good}"}, *all_three(MISSING)),
    "malformed-key": Case(lambda k: {"Authorization": "Bearer not a key at all"}, *all_three(INVALID)),
    "malformed-bytes": Case(lambda k: {"x-api-key": "hk-\xff\xfe.secret"}, *all_three(INVALID)),
    "truncated": Case(lambda k: {"Authorization": f"Bearer {k.good[:-1]}"}, *all_three(INVALID)),
    "wrong-prefix": Case(lambda k: {"Authorization": f"Bearer sk-{k.good[3:]}"}, *all_three(INVALID)),
    "unknown": Case(lambda k: {"Authorization": f"Bearer {k.unknown}"}, *all_three(INVALID)),
    "revoked": Case(lambda k: {"Authorization": f"Bearer {k.revoked}"}, *all_three(INVALID)),
    "expired": Case(lambda k: {"x-api-key": k.expired}, *all_three(Expect(401, "invalid_api_key", "expired"))),
    "rotated-out": Case(lambda k: {"x-api-key": k.rotated_out}, *all_three(Expect(401, "invalid_api_key", "rotated"))),
    "model-forbidden": Case(lambda k: {"Authorization": f"Bearer {k.restricted}"}, *RESTRICTED),
    "forged-identity-without-key": Case(lambda k: {**FORGED, "x-hearth-key-id": str(k.good_id)}, *all_three(MISSING)),
    "forged-identity-on-a-restricted-key": Case(
        lambda k: {**FORGED, "x-hearth-key-id": str(k.good_id), "Authorization": f"Bearer {k.restricted}"}, *RESTRICTED
    ),
    "forged-identity-on-a-good-key": Case(  # authenticated as the key it sent, nothing more: the model is unknown
        lambda k: {**FORGED, "Authorization": f"Bearer {k.good}"},
        post=Expect(404, "model_not_found", "no-such-model"),
        listing=Expect(200, None),
        show=Expect(404, "model_not_found"),
        model="no-such-model",
    ),
    "revoked-key-beside-a-forged-header": Case(
        lambda k: {**FORGED, "x-api-key": k.revoked, "Authorization": "Bearer forged"}, *all_three(INVALID)
    ),
}
ROUTES = [
    *(("POST", path, surface) for path, (_, surface) in POST_ROUTES.items()),
    *(("GET", path, Surface.OPENAI) for path in GET_ROUTES),
]


def check(answer: httpx.Response, surface: Surface, expect: Expect, sent: dict[str, str]) -> list[str]:
    """What is wrong with ``answer`` (empty: nothing)."""
    wrong = [] if answer.status_code == expect.status else [f"status {answer.status_code}, not {expect.status}"]
    if answer.headers.get("content-type") != "application/json":
        wrong.append(f"content-type {answer.headers.get('content-type')}")
    body = answer.json()
    if expect.status == 200:
        return wrong + ([] if body.get("object") == "list" and body["data"] == [] else [f"body {body}"])
    if surface == Surface.ANTHROPIC:
        error = body.get("error", {})
        if (
            set(body) != {"type", "error"}
            or body["type"] != "error"
            or error.get("type") != ANTHROPIC_TYPES[expect.status]
        ):
            wrong.append(f"not Anthropic's error shape: {body}")
    else:
        error = body.get("error", {})
        if set(body) != {"error"} or set(error) != {"message", "type", "param", "code"} or error["code"] != expect.code:
            wrong.append(f"not OpenAI's error shape with code {expect.code}: {body}")
    if expect.says not in error.get("message", "") or not error.get("message"):
        wrong.append(f"message does not say {expect.says!r}: {error.get('message')!r}")
    if any(value in answer.text for value in sent.values() if len(value) > 20):
        wrong.append("the answer echoes a credential")
    return wrong


@pytest.mark.parametrize("name", CASES)
def test_every_route_answers_a_bad_credential_in_its_apis_shape(gateway: str, keys: Keys, name: str) -> None:
    case = CASES[name]
    headers = case.headers(keys)
    sent = httpx.Headers(headers, encoding="latin-1")  # malformed-bytes sends bytes past ASCII
    failures = []
    for method, path, surface in ROUTES:
        url = gateway + path.replace("{model}", case.model)
        if method == "POST":
            answer, expect = (
                httpx.post(url, headers=sent, json=body_for(path, {**BODY, "model": case.model})),
                case.post,
            )
        else:
            answer = httpx.get(url, headers=sent)
            expect = case.show if "{model}" in path else case.listing
        failures += [f"{method} {path}: {problem}" for problem in check(answer, surface, expect, headers)]
    assert failures == []


def test_the_table_covers_every_route_and_both_surfaces() -> None:
    assert {path for _, path, _ in ROUTES} == {*POST_ROUTES, *GET_ROUTES}
    assert {surface for _, _, surface in ROUTES} == set(Surface)


def test_the_probes_are_open_to_anyone_with_any_host(gateway: str) -> None:
    for path in ("/health", "/ready"):
        for headers in ({}, {"Host": "balancer.internal"}, FORGED):
            answer = httpx.get(gateway + path, headers=headers)
            assert answer.status_code == 200 and answer.headers["content-type"] == "application/json", answer.text
    assert httpx.get(gateway + "/ready").json()["status"] == "ready"


def test_metrics_need_their_token(gateway: str, keys: Keys) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {keys.good}"},
        FORGED,
        {"Authorization": METRICS_TOKEN},
    ):
        answer = httpx.get(gateway + "/metrics", headers=headers)
        assert answer.status_code == 401 and METRICS_TOKEN not in answer.text, headers
    httpx.get(gateway + "/v1/models")  # a refusal the gateway counts, whichever tests ran here before
    answer = httpx.get(gateway + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert answer.status_code == 200 and "hearth_gateway" in answer.text
