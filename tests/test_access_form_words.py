"""The access forms name what the user sees: a limit refused by console.access.key_limits (a member's ceiling, an
expiry in the past, a model not served) is shown under its field with the field's label, not at the top of the
form with the JSON API's field name; the JSON API keeps its words."""

import re
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from console.access import keys, members
from tests.conftest import serving

pytestmark = pytest.mark.django_db


def field_errors(html: str) -> dict[str, list[str]]:
    """Each field's errors on a page, by field name ("__all__": the form's own, at its top)."""
    found: dict[str, list[str]] = {}
    for attrs, items in re.findall(r'<ul class="errorlist([^>]*)>(.*?)</ul>', html, re.S):
        name = re.search(r'id="id_(\w+)_error"', attrs)
        found[name.group(1) if name else "__all__"] = re.findall(r"<li>(.*?)</li>", items, re.S)
    return found


@pytest.fixture
def mia(client: Client, member: Any, admin_user: Any) -> Client:
    """The member mia, signed in, with ceilings an admin set on her keys."""
    serving("smol", "big", "other")
    limits = {"allowed_models": ["smol", "big"], "max_concurrent": 4, "max_key_days": 30}
    members.set_member_limits(admin_user, member, **limits, monthly_budget_usd=Decimal("20"))
    client.force_login(member)
    return client


@pytest.mark.parametrize(
    ("typed", "field", "shown"),
    [
        ({"max_concurrent": "5"}, "max_concurrent", "Requests at once must be at most 4 (the limit set for you)."),
        (
            {"monthly_budget_usd": "20.01"},
            "monthly_budget_usd",
            "Monthly budget (USD) must be at most 20.00 USD (the limit set for you).",
        ),
        (
            {"expires_in_days": "31"},
            "expires_in_days",
            "Expires in days must be at most 30 days away (the limit set for you).",
        ),
        ({"allowed_models": "other"}, "allowed_models", "Allowed models must be among yours: big, smol."),
        ({"allowed_models": " , ,"}, "allowed_models", "No model name here; leave it empty to allow every model."),
        (
            {"allowed_models": "nope"},
            "allowed_models",
            "No deployment serves &#x27;nope&#x27;. Allowed models are served model names: big, other, smol.",
        ),
        (
            {"max_tokens_cap": str(2**31)},
            "max_tokens_cap",
            "Ensure this value is less than or equal to 2147483647.",
        ),
    ],
)
def test_a_new_key_over_a_limit_is_refused_under_its_field_by_its_label(
    mia: Client, typed: dict[str, str], field: str, shown: str
) -> None:
    resp = mia.post("/keys/", {"name": "laptop", **typed})
    assert resp.status_code == 200 and field_errors(resp.content.decode()) == {field: [shown]}
    assert not keys.visible_keys(resp.wsgi_request.user).exists()


@pytest.mark.parametrize(
    ("typed", "field", "shown"),
    [
        ({"max_concurrent": "5"}, "max_concurrent", "Requests at once must be at most 4 (the limit set for you)."),
        ({"expires_at": "2000-01-01 00:00"}, "expires_at", "Expires (UTC) must be in the future (or empty for never)."),
        (
            {"expires_at": "2099-01-01 00:00"},
            "expires_at",
            "Expires (UTC) must be at most 30 days away (the limit set for you).",
        ),
    ],
)
def test_a_change_of_a_keys_limits_over_a_limit_is_refused_under_its_field(
    mia: Client, member: Any, typed: dict[str, str], field: str, shown: str
) -> None:
    row, _ = keys.create_key("laptop", member)
    resp = mia.post(f"/keys/{row.pk}/", typed)
    assert resp.status_code == 200 and field_errors(resp.content.decode()) == {field: [shown]}


@pytest.mark.parametrize(
    ("typed", "field", "shown"),
    [
        (
            {"allowed_models": "nope"},
            "allowed_models",
            "No deployment serves &#x27;nope&#x27;. Allowed models are served model names: big, other, smol.",
        ),
        ({"allowed_models": ",,,"}, "allowed_models", "No model name here; leave it empty to allow every model."),
        ({"tokens_per_day": str(2**31)}, "tokens_per_day", "Ensure this value is less than or equal to 2147483647."),
        ({"max_keys": str(2**31)}, "max_keys", "Ensure this value is less than or equal to 2147483647."),
        ({"monthly_budget_usd": "0"}, "monthly_budget_usd", "Ensure this value is greater than or equal to 0.01."),
    ],
)
def test_a_members_limit_out_of_range_is_refused_under_its_field(
    admin: Client, member: Any, typed: dict[str, str], field: str, shown: str
) -> None:
    serving("smol", "big", "other")
    resp = admin.post(f"/members/{member.pk}/", {"role": "member", "is_active": "on", **typed})
    assert resp.status_code == 200 and field_errors(resp.content.decode()) == {field: [shown]}


def test_a_refusal_about_no_field_stays_at_the_top_of_the_form(mia: Client, member: Any, admin_user: Any) -> None:
    members.set_member_limits(admin_user, member, max_keys=1)
    keys.create_key("first", member)
    page = mia.post("/keys/", {"name": "second"}).content.decode()
    held = "You hold 1 live key, and the most allowed for you is 1; revoke one first."
    assert field_errors(page) == {"__all__": [held]}


def test_the_json_api_keeps_its_field_names(mia: Client) -> None:
    resp = mia.post("/api/keys", {"name": "ci", "max_concurrent": 5}, content_type="application/json")
    assert (resp.status_code, resp.json()) == (
        400,
        {"detail": "max_concurrent must be at most 4 (the limit set for you)."},
    )


def test_the_key_forms_help_says_the_members_limits_that_an_empty_field_takes(
    mia: Client, member: Any, admin_user: Any
) -> None:
    page = mia.get("/keys/").content.decode()
    assert "At most 4, your limit; empty: that limit." in page  # requests at once
    assert "At most 30, your limit; empty: 30 days." in page  # the new key's days
    assert "within your limit: big, smol; empty: all of them." in page and "Empty: never." not in page
    row, _ = keys.create_key("laptop", member)
    own = mia.get(f"/keys/{row.pk}/").content.decode()
    assert "within 30 days (your limit); empty: 30 days from now." in own
    admin = Client()
    admin.force_login(admin_user)
    theirs = admin.get(f"/keys/{row.pk}/").content.decode()
    assert "At most 4, its owner's limit; empty: that limit." in theirs


def test_every_limit_over_its_ceiling_is_shown_at_once_each_under_its_field(mia: Client, member: Any) -> None:
    typed = {"name": "laptop", "max_concurrent": "5", "expires_in_days": "31", "allowed_models": "other"}
    resp = mia.post("/keys/", typed)
    assert field_errors(resp.content.decode()) == {
        "max_concurrent": ["Requests at once must be at most 4 (the limit set for you)."],
        "expires_in_days": ["Expires in days must be at most 30 days away (the limit set for you)."],
        "allowed_models": ["Allowed models must be among yours: big, smol."],
    }
    api = mia.post("/api/keys", {"name": "laptop", "max_concurrent": 5, "expires_in_days": 31}, "application/json")
    assert api.status_code == 400 and api.json()["detail"] == (
        "max_concurrent must be at most 4 (the limit set for you). "
        "expires_at must be at most 30 days away (the limit set for you)."
    )
    assert not keys.visible_keys(resp.wsgi_request.user).exists()
