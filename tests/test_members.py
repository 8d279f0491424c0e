"""The members pages: an admin adds people, sets their role, state and limits; the appliance always keeps an
active admin; disabling someone ends their sign-in and revokes their keys, as making them a viewer revokes them."""

from typing import Any

import pytest
from django.test import Client

from console.access.keys import create_key
from console.access.models import ApiKey, Member
from console.audit.models import AuditEntry
from tests.conftest import serving

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-password-1"


def form(role: str = "member", active: bool = True, **limits: str) -> dict[str, str]:
    return {"role": role, **({"is_active": "on"} if active else {}), **limits}


def test_an_admin_adds_members_and_a_common_password_is_refused(root: Client) -> None:
    resp = root.post("/members/", {"username": "mia", "password": PASSWORD, "role": "viewer"}, follow=True)
    assert "Added mia as viewer." in resp.content.decode() and Member.objects.get(user__username="mia").role == "viewer"
    assert Client().post("/login/", {"username": "mia", "password": PASSWORD}).status_code == 302
    page = root.post("/members/", {"username": "bob", "password": "password", "role": "member"}).content.decode()
    assert "This password is too common." in page


def test_role_and_limits_are_set_on_the_member_page(root: Client, django_user_model: Any) -> None:
    mia = django_user_model.objects.create_user("mia", "", PASSWORD)
    Member.objects.create(user=mia, role="viewer")
    serving("smol", "big")
    resp = root.post(
        f"/members/{mia.pk}/",
        form("member", tokens_per_day="5000", allowed_models="smol, big", monthly_budget_usd="25.5", max_key_days="30"),
    )
    assert resp.status_code == 302
    member = Member.objects.get(user=mia)
    assert (
        member.role,
        member.tokens_per_day,
        member.allowed_models,
        str(member.monthly_budget_usd),
        member.max_key_days,
    ) == ("member", 5000, ["big", "smol"], "25.50", 30)
    root.post(f"/members/{mia.pk}/", form("admin"))
    mia.refresh_from_db()
    assert mia.is_superuser


def test_the_last_active_admin_can_be_neither_demoted_nor_disabled(root: Client, django_user_model: Any) -> None:
    me = django_user_model.objects.get(username="root")
    for data in (form("member"), form("admin", active=False)):
        page = root.post(f"/members/{me.pk}/", data).content.decode()
        assert "root is the only active admin; make someone else admin first." in page
    me.refresh_from_db()
    assert me.is_superuser and me.is_active


def test_disabling_someone_revokes_their_keys_and_ends_their_sign_in(root: Client, django_user_model: Any) -> None:
    mia = django_user_model.objects.create_user("mia", "", PASSWORD)
    Member.objects.create(user=mia, role="member")
    create_key("laptop", mia)
    theirs = Client()
    assert theirs.post("/login/", {"username": "mia", "password": PASSWORD}).status_code == 302
    assert root.post(f"/members/{mia.pk}/", form("member", active=False)).status_code == 302
    assert ApiKey.objects.get(owner=mia).revoked_at is not None
    assert theirs.get("/keys/")["Location"].startswith("/login/")
    assert theirs.post("/login/", {"username": "mia", "password": PASSWORD}).status_code == 200  # refused


def test_a_member_made_a_viewer_has_their_live_keys_revoked_and_audited(root: Client, django_user_model: Any) -> None:
    """A fresh user's trial: a member made a viewer kept keys that served, and could no longer revoke them."""
    mia = django_user_model.objects.create_user("mia", "", PASSWORD)
    Member.objects.create(user=mia, role="member")
    create_key("laptop", mia)
    assert root.post(f"/members/{mia.pk}/", form("viewer")).status_code == 302
    assert ApiKey.objects.get(owner=mia).revoked_at is not None
    assert AuditEntry.objects.filter(action="key.revoke", changes__why="owner made a viewer").count() == 1


def test_lowering_live_keys_under_what_a_member_holds_says_what_happens(root: Client, django_user_model: Any) -> None:
    """A fresh user's trial: the save said nothing while the member kept two keys under a limit of one."""
    mia = django_user_model.objects.create_user("mia", "", PASSWORD)
    Member.objects.create(user=mia, role="member")
    create_key("laptop", mia)
    create_key("ci", mia)
    page = root.post(f"/members/{mia.pk}/", form("member", max_keys="1"), follow=True).content.decode()
    assert "mia holds 2 live keys, over the new limit of 1: they keep working" in page
    assert ApiKey.objects.filter(owner=mia, revoked_at__isnull=True).count() == 2
