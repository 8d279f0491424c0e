"""An admin sets a new password for a member who forgot theirs, on the member's page: Django's validators judge it,
the member's sessions end, the audit log says who set it (a trial found only manage.py could)."""

import pytest
from django.test import Client

from console.audit.models import AuditEntry
from tests.conftest import MEMBER_PASSWORD

pytestmark = pytest.mark.django_db
NEW = "another-long-password-7"


def test_an_admin_sets_a_members_password_and_their_sessions_end(admin: Client, member: object) -> None:
    mia = Client()
    assert mia.post("/login/", {"username": "mia", "password": MEMBER_PASSWORD}).status_code == 302
    assert mia.get("/keys/").status_code == 200
    url = f"/members/{member.pk}/password/"  # type: ignore[attr-defined]
    page = admin.get(f"/members/{member.pk}/").content.decode()  # type: ignore[attr-defined]
    assert 'action="' + url + '"' in page
    # the role and state forms show what is stored (a review saw a member shown as an inactive admin, unsaved)
    assert '<option value="member" selected>' in page and 'id="id_is_active" checked>' in page

    differ = admin.post(url, {"password": NEW, "password2": NEW + "x"}).content.decode()
    assert "The two passwords differ." in differ
    weak = admin.post(url, {"password": "password", "password2": "password"}).content.decode()
    assert "This password is too common." in weak
    assert not AuditEntry.objects.filter(action="member.password").exists()

    done = admin.post(url, {"password": NEW, "password2": NEW}, follow=True)
    assert "New password set for mia; their sessions ended." in done.content.decode()
    assert mia.get("/keys/").status_code == 302  # signed out: to the sign-in page
    assert Client().post("/login/", {"username": "mia", "password": MEMBER_PASSWORD}).status_code == 200  # refused
    assert Client().post("/login/", {"username": "mia", "password": NEW}).status_code == 302
    [entry] = AuditEntry.objects.filter(action="member.password")
    assert (entry.actor_name, entry.target_name, entry.changes) == ("admin", "mia", {"set_by_admin": True})

    assert mia.post("/login/", {"username": "mia", "password": NEW}).status_code == 302
    assert mia.post(url, {"password": NEW, "password2": NEW}).status_code == 403  # admins only
