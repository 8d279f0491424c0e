"""Every bad input a 4xx in the right shape: each /api operation fed malformed JSON, the wrong types,
over-long and NUL-bearing strings, out-of-range numbers and unknown fields answers 4xx ``{"detail": "..."}``
(never a 500, never HTML), and the console's forms answer them on the page, never with a server error."""

import json
from typing import Any

import pytest
from django.db import transaction
from django.test import Client, override_settings

from console.access.models import ApiKey
from console.api import api
from console.catalog.models import ModelSource
from console.deployments.models import Deployment
from tests.test_console import SMOLLM2_CONFIG

pytestmark = pytest.mark.django_db
LONG = "x" * 20_000
# A body each operation accepts; the test spoils one field of it at a time.
VALID = {
    "POST /api/models": {"name": "m2", "path": "/no/such/folder"},
    "POST /api/plan": {"model": "smol"},
    "POST /api/deployments": {"name": "d2", "model": "smol", "max_model_len": 1024},
    "POST /api/deployments/{pk}/change": {"max_model_len": 1024},
    "POST /api/deployments/{pk}/launch": {"make_room": False},
    "POST /api/deployments/{pk}/wake": {"make_room": False},
    "POST /api/deployments/{pk}/stop": {},
    "POST /api/deployments/{pk}/sleep": {},
    "POST /api/deployments/{pk}/capacity-checks": {"profile": "chat", "levels": [1, 2], "max_seconds": 30},
    "POST /api/deployments/{pk}/slo": {"ttft_seconds": 1.0, "itl_seconds": 0.05},
    "POST /api/deployments/{pk}/tunings": {"knob": "max_num_seqs", "values": "64, 128"},
    "POST /api/external-deployments": {"base_url": "http://127.0.0.1:1", "engine_kind": "vllm"},
    "POST /api/deployments/{pk}/endpoints": {"base_url": "http://127.0.0.1:1", "engine_kind": "vllm"},
    "POST /api/keys": {"name": "k2"},
    "PATCH /api/keys/{pk}": {"max_tokens_cap": 10},
    "POST /api/keys/{pk}/rotate": {"grace_seconds": 10},
    "POST /api/members": {"username": "u2", "password": "a-long-password-1", "role": "member"},
    "PATCH /api/members/{pk}": {"role": "member"},
    "POST /api/gpu-prices": {"gpu_model": "NVIDIA L4", "usd_per_gpu_hour": "0.8", "source": "a quote"},
    "PUT /api/deployments/{pk}/price": {"usd_per_million_input": "0.5", "usd_per_million_output": "1.5"},
    "PATCH /api/alerts/rules/{kind}": {"enabled": True, "threshold": 0.5, "for_minutes": 5, "repeat_minutes": 60},
    "PUT /api/alerts/destination": {"webhook_url": "https://hooks.example.com/x", "email_to": "a@b.co"},
}
SPOILED = {  # JSON type → values no field of that type accepts
    "string": [LONG, "a\u0000b", 5, ["x"]],
    "integer": ["lots", -1, 10**30, 1.5, [1], True, "12"],  # strict: neither read as 1 or 12
    "number": ["lots", -1e308, 1e308, {}, True, "1.5"],
    "decimal": ["lots", -1e308, 1e308, {}, True],  # money: a number or its digits as a string, "1.5" included
    "boolean": ["maybe", [True], 1, "yes", "true"],
    "array": ["smol", [LONG], ["\u0000"], [5]],
    "object": ["smol", [1], {"levels": "many"}],
}
WHOLE = ["{not json", "[]", "null", "5", '"text"']


@pytest.fixture
def world(admin: Client) -> dict[str, int]:
    model = ModelSource.objects.create(
        name="smol", kind="local", path="/m", config=SMOLLM2_CONFIG, weights_bytes=269_030_016
    )
    dep = Deployment.objects.create(
        name="smol",
        model=model,
        engine="vllm-cpu",
        served_model_name="smol",
        max_model_len=2048,
        kv_space_gib=1.0,
        plan={"fits": True},
        state="stopped",
    )
    key = admin.post("/api/keys", {"name": "k"}, content_type="application/json").json()
    member = admin.post(
        "/api/members", VALID["POST /api/members"] | {"username": "u1"}, content_type="application/json"
    ).json()
    return {"models": model.pk, "deployments": dep.pk, "keys": key["id"], "members": member["id"]}


def fields(operation: str) -> dict[str, str]:
    """The operation's body fields → their JSON type (the first one given for a nullable field)."""
    method, path = operation.split()
    schema = api.get_openapi_schema()
    body = schema["paths"][path][method.lower()]["requestBody"]["content"]["application/json"]["schema"]
    ref = next(b["$ref"] for b in (body, *body.get("anyOf", [])) if "$ref" in b)  # an optional body: anyOf it, null
    props = schema["components"]["schemas"][ref.rsplit("/", 1)[1]].get("properties", {})
    types = {name: _json_type(prop) for name, prop in props.items()}
    return {name: kind for name, kind in types.items() if kind in SPOILED}


def _json_type(prop: dict[str, Any]) -> str | None:
    """A property's JSON type: its own, the first non-null one of a union, "object" for a nested schema, or
    "decimal" for pydantic's Decimal (a number or a string)."""
    if "$ref" in prop:
        return "object"
    given = [prop, *prop.get("anyOf", [])]
    if {"number", "string"} <= {t.get("type") for t in given}:
        return "decimal"
    return next((t["type"] for t in given if t.get("type") not in (None, "null")), None)


def test_the_valid_bodies_here_name_every_operation_that_takes_one() -> None:
    paths = api.get_openapi_schema()["paths"]
    taking = {f"{m.upper()} {p}" for p, item in paths.items() for m, op in item.items() if "requestBody" in op}
    assert set(VALID) == taking


@override_settings(HEARTH_DOCTOR_WAIT=0.05)
@pytest.mark.parametrize("operation", sorted(VALID))
def test_every_api_operation_answers_each_spoiled_field_with_a_4xx_in_its_shape(
    admin: Client, world: dict[str, int], operation: str
) -> None:
    method, path = operation.split()
    url = path.replace("{pk}", str(world[path.split("/")[2]])) if "{pk}" in path else path
    url = url.replace("{kind}", "kv_cache_high")  # a ratio 0–1: every threshold past 1 is refused
    send = getattr(admin, method.lower())
    wrong = []
    bodies = [(body, body) for body in WHOLE]
    bodies.append(("an unknown field", VALID[operation] | {"max_token_cap": 10}))  # a typo is refused, not ignored
    bodies += [
        (f"{name}={value!r:.40}", VALID[operation] | {name: value})
        for name, kind in fields(operation).items()
        for value in SPOILED[kind]
    ]
    for shown, body in bodies:
        with transaction.atomic():
            resp = send(url, body, content_type="application/json")
            transaction.set_rollback(True)
        ok = 400 <= resp.status_code < 500 and resp["Content-Type"].startswith("application/json")
        if not ok or not isinstance(resp.json().get("detail"), str | list):
            wrong.append(f"{shown}: {resp.status_code} {resp.content[:160]!r}")
    assert not wrong, f"{operation}:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    "path",
    [
        "/api/deployments/99999",
        "/api/keys/99999",
        "/api/models/abc",
        "/api/usage?since=junk",
        "/api/audit?since=2026-13-40",
        "/api/usage?group=" + LONG,
        "/api/audit?actor=%00",
        "/api/nothing",
    ],
)
def test_unknown_ids_and_bad_queries_are_4xx_json(admin: Client, path: str) -> None:
    method = "delete" if path.startswith("/api/keys/") else "get"
    resp = getattr(admin, method)(path)
    assert 400 <= resp.status_code < 500 and "detail" in resp.json(), (path, resp.status_code, resp.content[:200])


@pytest.mark.parametrize("method", ["put", "patch", "head", "options"])
def test_a_method_an_api_path_does_not_serve_is_a_405_json_naming_those_it_does(admin: Client, method: str) -> None:
    resp = getattr(admin, method)("/api/keys")
    assert (resp.status_code, resp["Content-Type"], resp["Allow"]) == (405, "application/json", "GET, POST")
    if method != "head":
        assert resp.json()["detail"] == f"{method.upper()} is not served here; use GET, POST."


def test_an_over_long_model_path_is_a_400_not_a_500(admin: Client) -> None:
    resp = admin.post("/api/models", {"name": "m", "path": "/" + "a" * 5000}, content_type="application/json")
    assert resp.status_code == 400 and "too long" in resp.json()["detail"]
    page = admin.post("/models/", {"local-name": "m", "local-path": "/" + "a" * 5000})
    assert page.status_code == 200 and "at most 500 characters" in page.content.decode()
    assert not ModelSource.objects.exists()


def test_a_body_over_the_upload_limit_is_a_413_in_the_apis_shape(admin: Client, settings: Any) -> None:
    body = json.dumps({"name": "k", "pad": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)})
    resp = admin.post("/api/keys", body, content_type="application/json")
    assert resp.status_code == 413 and "request body is over" in resp.json()["detail"], resp.content[:200]
    assert not ApiKey.objects.exists()


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("/keys/", {"name": LONG, "max_tokens_cap": "10" * 30, "daily_budget_usd": "1e400"}),
        ("/keys/", {"name": "\u0000", "allowed_models": "\u0000,x"}),
        ("/members/", {"username": LONG, "password": "p" * 5000, "role": "root"}),
        ("/deployments/", {"name": LONG, "model": "999999", "max_model_len": "9" * 40}),
        ("/models/", {"hf-name": "m", "hf-repo_id": LONG, "hf-revision": "\u0000"}),
        ("/password/", {"old_password": LONG, "new_password1": "\u0000", "new_password2": "x"}),
    ],
)
def test_console_forms_answer_bad_input_on_the_page(admin: Client, path: str, data: dict[str, str]) -> None:
    resp = admin.post(path, data)
    assert resp.status_code in (200, 400), (path, resp.status_code)
