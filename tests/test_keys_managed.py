"""Keys people manage: created within their member limits, rotated with a grace period they choose, changed
and revoked; a new secret shown once, never kept readable in the session or Redis; each key's use shown."""

import json
import re
import socket
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import redis
from django.conf import settings
from django.contrib.sessions.models import Session
from django.test import Client, override_settings
from django.utils import timezone

from appliance.redis_keys import redis_key
from console.access import key_format, keys, members, shown_once
from console.access.key_limits import LimitError
from console.access.models import ApiKey, Member
from console.deployments.models import Deployment
from console.errors import ConsoleError
from console.observability.models import RequestLog
from tests.conftest import MEMBER_PASSWORD, serving

pytestmark = pytest.mark.django_db
PASSWORD = MEMBER_PASSWORD


@pytest.fixture
def mia(client: Client, member: Any) -> Client:
    assert client.post("/login/", {"username": "mia", "password": PASSWORD}).status_code == 302
    return client


def test_a_rotated_keys_old_secret_works_for_the_grace_then_is_refused(member: Any) -> None:
    row, old = keys.create_key("laptop", member)
    new = keys.rotate_key(row, member, grace_seconds=600)
    row.refresh_from_db()
    now = timezone.now()
    secrets_now = {prefix: digest for prefix, digest, _ in row.secrets_at(now)}
    assert secrets_now == {
        key_format.key_prefix(new): key_format.hash_key(new),
        key_format.key_prefix(old): key_format.hash_key(old),
    }
    assert row.previous_valid_until is not None and abs((row.previous_valid_until - now).total_seconds() - 600) < 5
    later = {prefix for prefix, _, _ in row.secrets_at(now + timedelta(seconds=601))}
    assert later == {key_format.key_prefix(new)}
    assert row.secrets_at(now + timedelta(seconds=601)) == [(row.prefix, row.key_hash, None)]


def test_rotating_again_ends_the_earlier_grace_and_a_revoked_key_has_no_secret(member: Any) -> None:
    row, first = keys.create_key("laptop", member)
    second = keys.rotate_key(row, member, grace_seconds=3600)
    third = keys.rotate_key(row, member, grace_seconds=0)
    row.refresh_from_db()
    prefixes = {p for p, _, _ in row.secrets_at()}
    assert prefixes == {key_format.key_prefix(third)}  # no grace: the second stops now, the first long ago
    assert key_format.key_prefix(first) not in prefixes and row.previous_prefix == key_format.key_prefix(second)
    keys.revoke_key(row, member)
    row.refresh_from_db()
    assert row.secrets_at() == []
    with pytest.raises(ConsoleError, match="revoked or expired"):
        keys.rotate_key(row, member, 0)


def test_a_rotation_through_the_api_shows_the_new_secret_once(mia: Client) -> None:
    created = mia.post("/api/keys", {"name": "ci"}, content_type="application/json").json()
    rotated = mia.post(f"/api/keys/{created['id']}/rotate", {"grace_seconds": 60}, content_type="application/json")
    body = rotated.json()
    assert rotated.status_code == 200 and body["key"].startswith(body["prefix"]) and body["key"] != created["key"]
    assert mia.post(
        f"/api/keys/{created['id']}/rotate", {"grace_seconds": -1}, content_type="application/json"
    ).json() == {"detail": "The grace period must be from 0 to 30 days."}
    assert body["key"] not in json.dumps(mia.get("/api/keys").json())


def test_a_members_keys_get_their_ceilings_and_cannot_exceed_them(member: Any, admin_user: Any) -> None:
    serving("smol", "big", "other")
    members.set_member_limits(
        admin_user,
        member,
        allowed_models=["smol", "big"],
        tokens_per_day=1000,
        max_key_days=30,
        monthly_budget_usd=Decimal("20"),
        max_keys=2,
    )
    row, _ = keys.create_key("plain", member)
    assert (row.allowed_models, row.tokens_per_day, row.monthly_budget_usd) == (["big", "smol"], 1000, None)
    assert row.expires_at is not None and row.expires_at <= timezone.now() + timedelta(days=30)
    for limits, error in [
        ({"tokens_per_day": 1001}, "tokens_per_day must be at most 1,000 (the limit set for you)"),
        ({"allowed_models": ["other"]}, "Allowed models must be among yours: big, smol"),
        ({"expires_in_days": 31}, "expires_at must be at most 30 days away"),
        ({"monthly_budget_usd": Decimal("20.01")}, "monthly_budget_usd must be at most 20.00 USD"),
    ]:
        with pytest.raises(ConsoleError, match=re.escape(error)):
            keys.create_key("too much", member, **limits)
    keys.create_key("second", member, allowed_models=["smol"], monthly_budget_usd=Decimal("5"))
    with pytest.raises(ConsoleError, match="You hold 2 live keys, and the most allowed for you is 2; revoke one"):
        keys.create_key("third", member)
    assert ApiKey.objects.filter(owner=member).count() == 2


def test_lowering_a_members_limits_lowers_their_keys(member: Any, admin_user: Any) -> None:
    serving("a", "b", "c")
    row, _ = keys.create_key("laptop", member, tokens_per_minute=500, allowed_models=["a", "b"])
    members.set_member_limits(admin_user, member, tokens_per_minute=100, allowed_models=["b", "c"])
    row.refresh_from_db()
    assert (row.tokens_per_minute, row.allowed_models, row.requests_per_minute) == (100, ["b"], None)


def test_an_admins_keys_have_no_ceilings(admin_user: Any) -> None:
    Member.objects.create(user=admin_user, role="admin", tokens_per_day=10)
    row, _ = keys.create_key("ops", admin_user, tokens_per_day=10**6)
    assert row.tokens_per_day == 10**6


def test_a_key_limit_change_keeps_within_the_ceiling_and_a_budget_is_in_cents(mia: Client, member: Any) -> None:
    Member.objects.filter(user=member).update(daily_budget_usd=Decimal("3"))
    created = mia.post("/api/keys", {"name": "k", "daily_budget_usd": "1.5"}, content_type="application/json").json()
    finer = mia.patch(f"/api/keys/{created['id']}", {"daily_budget_usd": "2.999"}, content_type="application/json")
    assert finer.status_code == 400 and "2.999 USD would be 3.00" in finer.json()["detail"]  # not rounded unsaid
    patched = mia.patch(
        f"/api/keys/{created['id']}",
        {"daily_budget_usd": "3.00", "max_tokens_cap": 64},
        content_type="application/json",
    )
    assert patched.status_code == 200, patched.content
    assert (patched.json()["daily_budget_usd"], patched.json()["max_tokens_cap"]) == ("3.00", 64)
    over = mia.patch(f"/api/keys/{created['id']}", {"daily_budget_usd": 4}, content_type="application/json")
    assert over.status_code == 400 and "at most 3.00 USD" in over.json()["detail"]
    cleared = mia.patch(f"/api/keys/{created['id']}", {"max_tokens_cap": None}, content_type="application/json")
    assert cleared.json()["max_tokens_cap"] is None and cleared.json()["daily_budget_usd"] == "3.00"


def test_a_new_key_is_shown_once_and_never_readable_in_the_session_or_redis(mia: Client) -> None:
    resp = mia.post("/keys/", {"name": "laptop"})
    assert resp.status_code == 302 and "?shown=" in resp["Location"] and "#" not in resp["Location"]  # the top: the key
    page = mia.get(resp["Location"])
    key = re.search(r'data-field="new_key">([^<]+)<', page.content.decode()).group(1)  # type: ignore[union-attr]
    assert "no-store" in page["Cache-Control"]
    assert key.startswith(ApiKey.objects.get().prefix)
    assert 'data-field="new_key"' not in mia.get(resp["Location"]).content.decode()  # a reload shows nothing
    assert ApiKey.objects.count() == 1
    sessions = [s.get_decoded() for s in Session.objects.all()]
    assert key not in json.dumps(sessions, default=str)
    r = redis.Redis.from_url(settings.REDIS_URL)
    assert all(key.encode() not in (r.get(k) or b"") for k in r.scan_iter(redis_key("shown-key:*")))


@override_settings(REDIS_URL="redis://127.0.0.1:1/0")
def test_with_redis_unreachable_no_key_is_made_and_the_page_says_why(mia: Client) -> None:
    resp = mia.post("/keys/", {"name": "laptop"})
    assert resp.status_code == 200 and "Redis cannot be reached, so no key was made" in resp.content.decode()
    assert not ApiKey.objects.exists()


def test_with_redis_silent_no_key_is_made_and_the_page_answers_in_its_timeout(
    mia: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Redis that accepts and never answers (hung, or a network that drops): the key's page says so once the
    timeout passes, rather than hanging; the page that shows a secret finds none."""
    silent = socket.create_server(("127.0.0.1", 0))
    monkeypatch.setattr(shown_once, "REDIS_TIMEOUT", 0.3)
    try:
        with override_settings(REDIS_URL=f"redis://127.0.0.1:{silent.getsockname()[1]}/0"):
            resp = mia.post("/keys/", {"name": "laptop"})
            assert resp.status_code == 200 and "Redis cannot be reached, so no key was made" in resp.content.decode()
            assert shown_once.take("x" * 43) is None
    finally:
        silent.close()
    assert not ApiKey.objects.exists()


def test_each_key_shows_its_owner_last_use_and_todays_and_this_months_use(mia: Client, member: Any) -> None:
    row, _ = keys.create_key("laptop", member)
    now = timezone.now()
    page = mia.get("/keys/").content.decode()
    assert 'data-field="cost_none">no requests this month<' in page and "no price" not in page  # unused: not unpriced
    for when, prompt, completion, cost in [
        (now, 10, 5, "0.0015"),
        (now, 3, None, None),
        (now - timedelta(days=40), 100, 100, "0.02"),
    ]:
        RequestLog.objects.create(
            created_at=when,
            api_key=row,
            model="smol",
            surface="openai",
            endpoint="chat",
            status=200,
            prompt_tokens=prompt,
            completion_tokens=completion,
            duration_seconds=0.1,
            cost_usd=cost,
        )
    [listed] = mia.get("/api/keys").json()
    assert (listed["owner"], listed["requests_today"], listed["tokens_today"]) == ("mia", 2, 18)
    assert (listed["requests_month"], listed["tokens_month"]) == (2, 18)
    assert Decimal(str(listed["cost_today"])) == Decimal(str(listed["cost_month"])) == Decimal("0.0015")
    last = datetime.fromisoformat(listed["last_used_at"].replace("Z", "+00:00"))
    assert abs((last - now).total_seconds()) < 1
    page = mia.get("/keys/").content.decode()
    assert 'data-field="today">2 req, 18 tok</td>' in page
    assert 'data-field="cost_today">$0.0015</span> today' in page and 'data-field="cost_month">$0.0015</span>' in page
    desk, _ = keys.create_key("desk", member)
    RequestLog.objects.create(
        created_at=now, api_key=desk, model="smol", surface="openai", endpoint="chat", status=200, prompt_tokens=3,
        duration_seconds=0.1, cost_usd=None,
    )  # fmt: skip
    page = mia.get("/keys/").content.decode()
    assert "no price" in page and 'data-field="budget_unpriced"' not in page  # used, nothing of it priced, no budget
    ApiKey.objects.filter(pk=desk.pk).update(daily_budget_usd=Decimal("0.50"))
    page = mia.get(f"/keys/{desk.pk}/").content.decode()
    assert "(so its budget has not applied: a request with no price is charged nothing and passes)" in page
    assert 'data-field="outcomes_today"' not in page  # none refused or failed: nothing said
    RequestLog.objects.create(
        created_at=now, api_key=desk, model="smol", surface="openai", endpoint="chat", status=429, duration_seconds=0,
    )  # fmt: skip
    page = mia.get(f"/keys/{desk.pk}/").content.decode()  # a trial read "9 requests" where 6 had been refused
    assert "2 requests <small" in page and ">(1 refused)</small>, 3 tokens" in page
    for status, cancelled in ((503, False), (499, True)):  # the service's error; a client that left is neither
        RequestLog.objects.create(
            created_at=now, api_key=desk, model="smol", surface="openai", endpoint="chat", status=status,
            duration_seconds=0, client_cancelled=cancelled,
        )  # fmt: skip
    page = mia.get(f"/keys/{desk.pk}/").content.decode()  # as the Usage page counts them, which a trial compared
    assert "4 requests <small" in page and ">(1 refused, 1 failed)</small>, 3 tokens" in page
    assert ">(1 refused, 1 failed)</small>, 3 tok</td>" in mia.get("/keys/").content.decode()
    desk_rows = [r for r in mia.get("/api/usage?group=key").json() if r["group"].startswith("desk")]
    assert (sum(r["refused"] for r in desk_rows), sum(r["errors"] for r in desk_rows)) == (1, 1)
    refused_only, _ = keys.create_key("tight", member)  # a check: its one request refused read "no price"
    RequestLog.objects.create(
        created_at=now, api_key=refused_only, model="smol", surface="openai", endpoint="chat", status=400,
        duration_seconds=0,
    )  # fmt: skip
    page = mia.get(f"/keys/{refused_only.pk}/").content.decode()
    assert "no price" not in page and 'data-field="cost_today">$0.00</span> today' in page
    listed = next(k for k in mia.get("/api/keys").json() if k["id"] == refused_only.pk)
    assert (listed["cost_today"], listed["cost_month"]) == (0, 0)  # charged nothing, as the page says; not null


def test_allowed_models_must_be_served_in_the_api_and_on_the_keys_page(admin: Client) -> None:
    none_yet = (
        "No deployment serves 'smol'. Allowed models are served model names: none yet (leave it empty for every model)."
    )
    refused = admin.post("/api/keys", {"name": "k", "allowed_models": ["smol"]}, content_type="application/json")
    assert (refused.status_code, refused.json()) == (400, {"detail": none_yet})
    serving("smol", "big")
    said = "No deployment serves 'Smol', 'nope'. Allowed models are served model names: big, smol."
    refused = admin.post(
        "/api/keys", {"name": "k", "allowed_models": ["smol", "nope", "Smol"]}, content_type="application/json"
    )
    assert (refused.status_code, refused.json()) == (400, {"detail": said})  # as the gateway matches: exactly
    page = admin.post("/keys/", {"name": "k", "allowed_models": "smol, nope, Smol"})
    assert page.status_code == 200 and said.replace("'", "&#x27;") in page.content.decode()  # a form error
    assert not ApiKey.objects.exists()
    made = admin.post("/api/keys", {"name": "k", "allowed_models": ["smol"]}, content_type="application/json")
    assert made.status_code == 201
    patched = admin.patch(
        f"/api/keys/{made.json()['id']}", {"allowed_models": ["smol", "gone"]}, content_type="application/json"
    )
    assert patched.status_code == 400 and "No deployment serves 'gone'." in patched.json()["detail"]
    assert ApiKey.objects.get().allowed_models == ["smol"]


def test_a_name_a_key_holds_stays_when_its_deployment_is_gone(admin: Client, admin_user: Any) -> None:
    serving("smol")
    row, _ = keys.create_key("k", admin_user, allowed_models=["smol"])
    Deployment.objects.filter(served_model_name="smol").delete()
    page = admin.post(f"/keys/{row.pk}/", {"allowed_models": "smol", "max_tokens_cap": "64"})
    assert page.status_code == 302  # its other limits still change
    row.refresh_from_db()
    assert (row.allowed_models, row.max_tokens_cap) == (["smol"], 64)


def test_a_members_allowed_models_must_be_served_in_the_api_and_on_their_page(admin: Client, member: Any) -> None:
    serving("smol")
    said = "No deployment serves 'nope'. Allowed models are served model names: smol."
    page = admin.post(f"/members/{member.pk}/", {"role": "member", "is_active": "on", "allowed_models": "smol, nope"})
    assert page.status_code == 200 and said.replace("'", "&#x27;") in page.content.decode()
    refused = admin.patch(f"/api/members/{member.pk}", {"allowed_models": ["nope"]}, content_type="application/json")
    assert (refused.status_code, refused.json()) == (400, {"detail": said})
    assert Member.objects.get(user=member).allowed_models == []
    assert (
        admin.patch(
            f"/api/members/{member.pk}", {"allowed_models": ["smol"]}, content_type="application/json"
        ).status_code
        == 200
    )
    assert Member.objects.get(user=member).allowed_models == ["smol"]


def test_a_key_s_expiry_is_shown_in_its_field_as_its_help_says(admin: Client, admin_user: Any) -> None:
    row, _ = keys.create_key("dated", admin_user, expires_in_days=30)
    page = admin.get(f"/keys/{row.pk}/").content.decode()
    shown = re.search(r'name="expires_at" value="([^"]*)"', page)
    assert shown and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", shown.group(1)), shown


def test_a_members_key_expiry_is_not_renewed_past_its_secrets_age_without_rotating(
    member: Any, admin_user: Any
) -> None:
    """A fresh user's trial pushed a key's expiry 30 days on with each PATCH (expires_at: null), so "keys expire
    within 30 days" never made anyone rotate; rotating renews it."""
    members.set_member_limits(admin_user, member, max_key_days=30)
    key, _ = keys.create_key("laptop", member)
    born = timezone.now() - timedelta(days=20)
    ApiKey.objects.filter(pk=key.pk).update(created_at=born, expires_at=born + timedelta(days=30))
    key.refresh_from_db()
    kept = keys.set_key_limits(key, member, expires_at=None).expires_at
    assert kept == born + timedelta(days=30)  # not 30 days from now
    with pytest.raises(LimitError, match="30 days after its secret was made \\(rotate it to renew\\)"):
        keys.set_key_limits(key, member, expires_at=timezone.now() + timedelta(days=25))
    keys.rotate_key(key, member, 0)
    renewed = keys.set_key_limits(key, member, expires_at=None).expires_at
    assert renewed is not None and renewed > timezone.now() + timedelta(days=29)
