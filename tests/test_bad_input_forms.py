"""The bad-input sweep over the console's own pages (issue 36; the /api sweep is tests/test_bad_input.py): every
form on every page the URLconf has, as the admin sees it, sent with each of its fields 1 MB long in turn, and every
URL field with malformed URLs; every action a page posts to sent such fields too; /login/ and /setup/ as well.
Answers are the page with its errors, a redirect or a 4xx: never a 5xx."""

from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client, override_settings
from django.urls import resolve

from console.access.keys import create_key
from console.access.models import Member
from console.catalog.models import ModelSource
from console.deployments.models import Deployment
from tests.test_console import SMOLLM2_CONFIG
from tests.test_roles import PAGES, pages, url_for

pytestmark = pytest.mark.django_db
BIG = "x" * 1_000_000
BAD_URLS = [
    "http://0177.0.0.1:1",
    "http://[::1",
    "http://" + "a" * 300 + ":8000",
    "http://127.0.0.1:99999",
    "http://%00/",
    "javascript:alert(1)",
    "http://h\u0000st:1",
    "//no-scheme",
]
FIELDS_LIKE = {"deployments:plan": "deployments:list", "observability:slo": "capacity:slo"}  # a form's preview
NOT_SWEPT = {"access:logout"}  # posting it ends the session the sweep runs in; it reads no field


class Forms(HTMLParser):
    """The forms of a page: (method, action, {field name: the value it starts with}), submit buttons included."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, dict[str, str]]] = []
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.found.append((a.get("method", "get").lower(), a.get("action", ""), {}))
        elif self.found and tag in ("input", "textarea", "select", "button") and a.get("name"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            self.found[-1][2].setdefault(a["name"], a.get("value", ""))
            self._select = a["name"] if tag == "select" else None
        elif tag == "option" and self._select and self.found and not self.found[-1][2][self._select]:
            self.found[-1][2][self._select] = a.get("value", "")


def forms_of(html: str) -> list[tuple[str, str, dict[str, str]]]:
    parser = Forms()
    parser.feed(html)
    return parser.found


def spoiled(fields: dict[str, str]) -> Iterator[tuple[str, dict[str, str]]]:
    """Each field 1 MB long in turn, the others as the page gave them; each URL field given each malformed URL."""
    for name in fields:
        if name != "csrfmiddlewaretoken":
            yield f"{name}=1 MB", fields | {name: BIG}
        if "url" in name.lower():
            yield from ((f"{name}={url!r:.40}", fields | {name: url}) for url in BAD_URLS)


@pytest.fixture
def world(admin: Client, django_user_model: Any) -> dict[str, Any]:
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
    member = django_user_model.objects.create_user("member", "", "a-long-password-1")
    Member.objects.create(user=member, role="member")
    key, _ = create_key("laptop", member)
    return {"people": {"member": member}, "model": model, "deployment": dep, "key": key}


def answer(client: Client, method: str, path: str, data: dict[str, str]) -> int:
    """The status of one request, undone afterwards."""
    with transaction.atomic():
        if method == "post":  # as a browser sends a form
            resp = client.post(path, urlencode(data), content_type="application/x-www-form-urlencoded")
        else:
            resp = client.get(path, data)
        transaction.set_rollback(True)
    return int(resp.status_code)


@override_settings(HEARTH_DOCTOR_WAIT=0.05)  # no worker here: the pre-flight pages answer at once
def test_every_console_form_answers_oversized_and_malformed_fields_without_a_5xx(
    admin: Client, world: dict[str, Any]
) -> None:
    admin.raise_request_exception = False  # an exception is the 500 it would be, listed below
    routes = {name: url_for(route, world) for name, route in pages().items()}
    swept: set[tuple[str, str, frozenset[str]]] = set()  # a view's form once (the demo catalog has 30 alike)
    wrong, sent = [], 0
    for name, (get, _) in PAGES.items():
        if "A" not in get or name in NOT_SWEPT or name.startswith("api:"):
            continue
        page = admin.get(routes[name])
        if not page["Content-Type"].startswith("text/html"):
            continue
        for method, action, fields in forms_of(page.content.decode()):
            target = action or routes[name]
            form = (method, resolve(target.split("?")[0]).view_name, frozenset(fields))
            if form[1] in NOT_SWEPT or form in swept:
                continue
            swept.add(form)
            for shown, data in spoiled(fields):
                status = answer(admin, "post" if method == "post" else "get", target, data)
                sent += 1
                if status >= 500:
                    wrong.append(f"{method.upper()} {target} ({name}) {shown}: {status}")
    fields_of = {view: fields for _, view, fields in swept}
    assert {
        "access:keys",
        "catalog:models",
        "deployments:list",
        "deployments:external",
        "observability:mappings",
    } <= set(fields_of)
    for name, (_, post) in PAGES.items():
        if ("A" not in post and post != "*") or name in NOT_SWEPT or name in fields_of:
            continue
        # an action no page offered here: the fields of the form it previews, else two any action might read
        fields = dict.fromkeys(fields_of.get(FIELDS_LIKE.get(name, ""), ["name", "value"]), "")
        for shown, data in spoiled(fields):
            status = answer(admin, "post", routes[name], data)
            sent += 1
            if status >= 500:
                wrong.append(f"POST {routes[name]} ({name}) {shown}: {status}")
    assert sent > 100 and not wrong, "\n".join(wrong)
    assert admin.get("/keys/").status_code == 200  # still signed in: every answer above was the admin's


def test_sign_in_answers_oversized_and_malformed_fields_without_a_5xx(client: Client, admin_user: Any) -> None:
    client.raise_request_exception = False
    for data in (
        {"username": BIG, "password": "x"},
        {"username": "admin", "password": BIG},
        {"username": "admin\u0000", "password": "\u0000"},
        {"username": ["a", "b"], "password": ""},
        {},
    ):
        resp = client.post("/login/", data)
        assert resp.status_code < 500 and "_auth_user_id" not in client.session, (str(data)[:60], resp.status_code)
    page = client.post("/login/", {"username": BIG, "password": "x"}).content.decode()
    assert "at most 150 characters" in page  # the form's error, no sign-in attempt


def test_first_run_setup_answers_oversized_fields_without_a_5xx(client: Client) -> None:
    client.raise_request_exception = False
    for data in (
        {"username": BIG, "password": BIG, "password2": BIG},
        {"username": "root", "password": BIG, "password2": BIG},
        {"username": "root", "password": "long-enough-pw", "password2": BIG},
        {"username": "\u0000"},
    ):
        resp = client.post("/setup/", data)
        assert resp.status_code in (200, 400), (str(data)[:60], resp.status_code)
    assert not get_user_model().objects.exists()
