"""The role matrix: each role (and nobody signed in) against every console page and /api operation, through a
real session (signed in at /login/ with a password), allowed or 403; and the walk that makes a URL nobody
decided about fail here. Who may touch whose keys is tested at the end.

The expectations are written here from the product's promise (issue 14, point 1), not read from
console.access.policy: admin everything; member sees deployments and panels and manages their own keys;
viewer read-only (every key and everyone's usage, no actions); members and audit log for admins only.
"""

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver, get_resolver

from console.access import policy
from console.access.keys import create_key
from console.access.models import ApiKey, Member, Role
from console.api import api
from console.catalog.models import ModelSource
from console.deployments.models import Deployment
from tests.test_console import SMOLLM2_CONFIG

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-password-1"

# URL name: (who may GET, who may POST); A admin, M member, V viewer, * anyone (no sign-in needed)
PAGES = {
    "home": ("AMV", ""),
    "access:setup": ("*", "*"),
    "access:login": ("*", "*"),
    "access:logout": ("*", "*"),
    "access:oidc_start": ("*", ""),
    "access:oidc_callback": ("*", ""),
    "access:password": ("AMV", "AMV"),
    "access:keys": ("AMV", "AM"),
    "access:key": ("AMV", "AM"),
    "access:rotate": ("", "AM"),
    "access:revoke": ("", "AM"),
    "access:members": ("A", "A"),
    "access:member": ("A", "A"),
    "access:member_password": ("", "A"),
    "audit:log": ("A", ""),
    "audit:export_csv": ("A", ""),
    "audit:export_json": ("A", ""),
    "catalog:models": ("AMV", "A"),
    "catalog:delete": ("", "A"),
    "catalog:demo-plan": ("", "A"),
    "weights:cache": ("A", ""),
    "weights:free": ("", "A"),
    "deployments:list": ("AMV", "A"),
    "deployments:plan": ("", "A"),
    "deployments:detail": ("AMV", ""),
    "deployments:status": ("AMV", ""),
    "deployments:logs": ("AMV", ""),
    "deployments:launch": ("", "A"),
    "deployments:stop": ("", "A"),
    "deployments:sleep": ("", "A"),
    "deployments:wake": ("", "A"),
    "deployments:change": ("A", "A"),
    "deployments:remedy": ("", "A"),
    "deployments:delete": ("", "A"),
    "deployments:export": ("AMV", ""),
    "deployments:external": ("A", "A"),
    "deployments:add-endpoint": ("A", "A"),
    "deployments:remove-endpoint": ("", "A"),
    "capacity:deployment": ("AMV", "A"),
    "capacity:slo": ("", "A"),
    "capacity:tune": ("", "A"),
    "capacity:run": ("AMV", ""),
    "capacity:run-status": ("AMV", ""),
    "capacity:cancel": ("", "A"),
    "capacity:export-json": ("AMV", ""),
    "capacity:export-csv": ("AMV", ""),
    "capacity:compare": ("AMV", ""),
    "capacity:tuning": ("AMV", ""),
    "capacity:tuning-status": ("AMV", ""),
    "capacity:tuning-cancel": ("", "A"),
    "capacity:tuning-apply": ("", "A"),
    "deployments:export-file": ("AMV", ""),
    "observability:panel": ("AMV", ""),
    "observability:dashboard": ("AMV", ""),
    "observability:dashboard_live": ("AMV", ""),
    "observability:series": ("AMV", ""),
    "observability:slo": ("AMV", "A"),
    "observability:requests": ("AMV", ""),
    "observability:requests_csv": ("AMV", ""),
    "observability:costs": ("AMV", "A"),
    "observability:mappings": ("AMV", "A"),
    "preflight:page": ("AMV", ""),
    "preflight:checks": ("AMV", ""),
    "preflight:settings": ("A", ""),
    "preflight:bundle": ("A", ""),
    "alerts:page": ("AMV", ""),
    "alerts:rule": ("", "A"),
    "alerts:destination": ("", "A"),
    "alerts:test": ("", "A"),
    "usage:page": ("AMV", ""),
    "usage:export_csv": ("AMV", ""),
    "batches:list": ("AMV", ""),
    "batches:guessed": ("AMV", ""),
    "batches:table": ("AMV", ""),
    "batches:detail": ("AMV", ""),
    "batches:progress": ("AMV", ""),
    "batches:cancel": ("", "AM"),
    "batches:file": ("AM", ""),
    "api:api-root": ("AMV", ""),
    "api:openapi-json": ("AMV", ""),
    "api:openapi-view": ("AMV", ""),
}
API = {
    "GET /api/models": "AMV",
    "GET /api/models/demo": "AMV",
    "POST /api/models": "A",
    "DELETE /api/models/{pk}": "A",
    "POST /api/plan": "A",
    "GET /api/deployments": "AMV",
    "POST /api/deployments": "A",
    "GET /api/deployments/{pk}": "AMV",
    "DELETE /api/deployments/{pk}": "A",
    "POST /api/external-deployments": "A",
    "POST /api/deployments/{pk}/endpoints": "A",
    "DELETE /api/deployments/{pk}/endpoints/{replica_id}": "A",
    "POST /api/deployments/{pk}/launch": "A",
    "POST /api/deployments/{pk}/stop": "A",
    "POST /api/deployments/{pk}/sleep": "A",
    "POST /api/deployments/{pk}/wake": "A",
    "POST /api/deployments/{pk}/change": "A",
    "POST /api/deployments/{pk}/remedy": "A",
    "GET /api/deployments/{pk}/metrics": "AMV",
    "GET /api/deployments/{pk}/export": "AMV",
    "GET /api/deployments/{pk}/export/{target}": "AMV",
    "GET /api/doctor": "AMV",
    "GET /api/keys": "AMV",
    "POST /api/keys": "AM",
    "PATCH /api/keys/{pk}": "AM",
    "DELETE /api/keys/{pk}": "AM",
    "POST /api/keys/{pk}/rotate": "AM",
    "GET /api/members": "A",
    "POST /api/members": "A",
    "PATCH /api/members/{pk}": "A",
    "GET /api/usage": "AMV",
    "GET /api/audit": "A",
    "POST /api/deployments/{pk}/capacity-checks": "A",
    "GET /api/deployments/{pk}/capacity-checks": "AMV",
    "GET /api/capacity-checks/compare": "AMV",
    "GET /api/capacity-checks/{pk}": "AMV",
    "GET /api/capacity-checks/{pk}/export": "AMV",
    "POST /api/capacity-checks/{pk}/cancel": "A",
    "POST /api/deployments/{pk}/slo": "A",
    "POST /api/deployments/{pk}/tunings": "A",
    "GET /api/tunings/{pk}": "AMV",
    "POST /api/tunings/{pk}/{action}": "A",
    "GET /api/gpu-prices": "AMV",
    "POST /api/gpu-prices": "A",
    "GET /api/deployment-prices": "AMV",
    "PUT /api/deployments/{pk}/price": "A",
    "GET /api/alerts": "AMV",
    "GET /api/alerts/rules": "AMV",
    "PATCH /api/alerts/rules/{kind}": "A",
    "GET /api/alerts/destination": "AMV",
    "PUT /api/alerts/destination": "A",
    "POST /api/alerts/destination/test": "A",
}
LETTER = {"admin": "A", "member": "M", "viewer": "V"}


def walk(patterns: list[Any], namespace: str = "", route: str = "") -> Iterator[tuple[str, str]]:
    """(view name, route) of every URL pattern under ``patterns``."""
    for p in patterns:
        if isinstance(p, URLResolver):
            ns = f"{namespace}:{p.namespace}" if namespace and p.namespace else p.namespace or namespace
            yield from walk(p.url_patterns, ns, route + str(p.pattern))
        elif isinstance(p, URLPattern) and p.name:
            yield (f"{namespace}:{p.name}" if namespace else p.name), route + str(p.pattern)


def pages() -> dict[str, str]:
    """Every page's URL name → route (the /api operations aside)."""
    docs = {"api:api-root", "api:openapi-json", "api:openapi-view"}
    return {
        name: route for name, route in walk(get_resolver().url_patterns) if not name.startswith("api:") or name in docs
    }


def api_operations() -> set[str]:
    schema = api.get_openapi_schema()
    return {f"{method.upper()} {path}" for path, item in schema["paths"].items() for method in item}


def test_every_url_the_urlconf_has_is_decided_here_and_in_the_policy_table() -> None:
    assert set(pages()) == set(PAGES), "a page nobody decided about (add it here and to console.access.policy)"
    assert api_operations() == set(API), "an /api operation nobody decided about"
    assert set(policy.PAGES) == set(PAGES) and set(policy.API) == set(API)


@pytest.fixture
def world(django_user_model: Any) -> dict[str, Any]:
    admin = django_user_model.objects.create_superuser("root", "", PASSWORD)
    people = {"admin": admin}
    for role in ("member", "viewer"):
        people[role] = django_user_model.objects.create_user(role, "", PASSWORD)
        Member.objects.create(user=people[role], role=role)
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
    key, _ = create_key("member laptop", people["member"])
    return {"people": people, "model": model, "deployment": dep, "key": key}


def sign_in(client: Client, username: str) -> None:
    resp = client.post("/login/", {"username": username, "password": PASSWORD})
    assert resp.status_code == 302, resp.content[:500]


def url_for(route: str, world: dict[str, Any]) -> str:
    """A concrete path for a route, its <pk> or {pk} filled with the object that URL is about."""
    if "pk" not in route:
        return "/" + route.lstrip("/").replace("{kind}", "error_rate")
    pk = (
        world["key"].pk
        if "keys" in route
        else world["people"]["member"].pk
        if "members" in route
        else world["model"].pk
        if "models" in route
        else world["deployment"].pk
    )
    path = route.replace("<int:pk>", str(pk)).replace("{pk}", str(pk))
    path = path.replace("<int:replica_id>", "1").replace("{replica_id}", "1")
    return "/" + path.replace("<str:target>", "helm").replace("{target}", "helm").lstrip("/")


def outcome(client: Client, method: str, path: str, api_call: bool) -> str:
    """'ok', 'forbidden' (403) or 'sign-in' (401, or sent to the sign-in page), with the request undone."""
    with transaction.atomic():
        body = {"content_type": "application/json", "data": {}} if api_call and method in ("POST", "PATCH") else {}
        resp = getattr(client, method.lower())(path, **body)
        transaction.set_rollback(True)
    if resp.status_code == 403:
        return "forbidden"
    if resp.status_code == 401 or (resp.status_code == 302 and resp["Location"].startswith("/login/?next=")):
        return "sign-in"
    return "ok"


@override_settings(HEARTH_DOCTOR_WAIT=0.05)  # no worker here: the pre-flight pages answer at once
@pytest.mark.parametrize("role", ["admin", "member", "viewer", "anonymous"])
def test_each_role_against_every_page_and_api_operation(client: Client, world: dict[str, Any], role: str) -> None:
    wrong = []
    routes = pages()
    cases = [
        (name, method, url_for(routes[name], world), False, who)
        for name, (get, post) in PAGES.items()
        for method, who in (("GET", get), ("POST", post))
    ]
    cases += [(op, op.split()[0], url_for(op.split()[1], world), True, who) for op, who in API.items()]
    for name, method, path, api_call, who in cases:
        if role != "anonymous" and "_auth_user_id" not in client.session:
            sign_in(client, world["people"][role].username)  # first, and again after the logout case
        got = outcome(client, method, path, api_call)
        if who == "*":
            expected = {"ok", "sign-in"} if name == "access:setup" else {"ok"}
        elif role == "anonymous":
            expected = {"sign-in"}
        else:
            expected = {"ok"} if LETTER[role] in who else {"forbidden"}
        if got not in expected:
            wrong.append(f"{role} {method} {path} ({name}): {got}, expected {' or '.join(sorted(expected))}")
    assert not wrong, "\n".join(wrong)


def test_a_member_cannot_see_or_touch_someone_elses_key(client: Client, world: dict[str, Any]) -> None:
    theirs, _ = create_key("root's", world["people"]["admin"])
    sign_in(client, "member")
    assert client.post(f"/keys/{theirs.pk}/revoke/").status_code == 403
    refused = "This key is someone else's; only its owner or an admin may change it, and a member sees only their own."
    assert client.delete(f"/api/keys/{theirs.pk}").json() == {"detail": refused}
    assert client.post(f"/api/keys/{theirs.pk}/rotate", {}, content_type="application/json").status_code == 403
    assert client.get(f"/keys/{theirs.pk}/").status_code == 403
    assert [k["name"] for k in client.get("/api/keys").json()] == ["member laptop"]
    theirs.refresh_from_db()
    assert theirs.revoked_at is None and ApiKey.objects.filter(owner__username="member").count() == 1


def test_a_viewer_sees_every_key_but_holds_none(client: Client, world: dict[str, Any]) -> None:
    sign_in(client, "viewer")
    assert [k["name"] for k in client.get("/api/keys").json()] == ["member laptop"]
    page = client.get("/keys/").content.decode()
    assert "member laptop" in page and "Create key" not in page
    assert client.post("/api/keys", {"name": "mine"}, content_type="application/json").status_code == 403


def test_pages_offer_only_what_the_role_may_do(client: Client, world: dict[str, Any]) -> None:
    sign_in(client, "member")
    page = client.get(f"/deployments/{world['deployment'].pk}/").content.decode()
    assert "Launch" not in page and "Members" not in client.get("/deployments/").content.decode()
    assert Role.MEMBER.value in client.get("/keys/").content.decode()
