"""An admin makes a key for a member (or another admin), in the console and the JSON API: it is theirs, within their
ceilings, and an error names whose limit it is; nobody else makes a key for someone else (a trial's admin could not
issue a key for a member but through manage.py)."""

import json
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from console.access import keys
from console.access.models import ApiKey, Member
from console.audit.models import AuditEntry
from tests.conftest import MEMBER_PASSWORD

pytestmark = pytest.mark.django_db


def post(client: Client, body: dict[str, Any]) -> Any:
    return client.post("/api/keys", json.dumps(body), content_type="application/json")


def test_an_admin_makes_a_key_for_a_member_within_their_ceilings(admin: Client, member: Any) -> None:
    Member.objects.filter(user=member).update(requests_per_minute=10, max_keys=1, daily_budget_usd=Decimal("2"))
    over = post(admin, {"name": "ci", "owner": "mia", "requests_per_minute": 100})
    assert over.status_code == 400
    assert "requests_per_minute must be at most 10 (the limit set for mia)." in over.json()["detail"]
    made = post(admin, {"name": "ci", "owner": "mia"})
    assert made.status_code == 201 and made.json()["key"].startswith("hk-")
    key = ApiKey.objects.get(pk=made.json()["id"])
    assert key.owner == member and key.requests_per_minute == 10  # a budget left empty: the member's own applies
    entry = AuditEntry.objects.filter(action="key.create").latest("id")
    assert entry.actor_name == "admin" and entry.changes["owner"] == "mia"
    again = post(admin, {"name": "ci 2", "owner": "mia"})
    assert again.status_code == 400
    assert "mia holds 1 live key, and the most allowed for mia is 1; revoke one first." in again.json()["detail"]

    changed = admin.patch(
        f"/api/keys/{key.pk}", json.dumps({"requests_per_minute": 50}), content_type="application/json"
    )
    assert "requests_per_minute must be at most 10 (the limit set for mia)." in changed.json()["detail"]


def test_a_key_for_someone_else_is_refused_to_members_and_for_whom_holds_none(admin: Client, member: Any) -> None:
    viewer = User.objects.create_user("vic", "", MEMBER_PASSWORD)
    Member.objects.create(user=viewer, role="viewer")
    gone = User.objects.create_user("gus", "", MEMBER_PASSWORD, is_active=False)
    Member.objects.create(user=gone, role="member")
    assert (
        "No one here is named 'nobody'; owner takes a username"
        in post(admin, {"name": "x", "owner": "nobody"}).json()["detail"]
    )
    said = post(admin, {"name": "x", "owner": "MIA"}).json()["detail"]
    assert said == "No one here is named 'MIA'; did you mean 'mia'? Usernames are case-sensitive."
    for name in ("vic", "gus"):
        refused = post(admin, {"name": "x", "owner": name})
        assert refused.status_code == 400 and f"{name} may hold no key" in refused.json()["detail"]
    mia = Client()
    mia.force_login(member)
    refused = post(mia, {"name": "x", "owner": "admin"})
    assert refused.status_code == 400 and "Only an admin makes a key for someone else." in refused.json()["detail"]
    assert not ApiKey.objects.exists()
    assert post(mia, {"name": "mine", "owner": "mia"}).status_code == 201  # naming oneself is making one's own


def test_the_keys_page_lets_an_admin_choose_the_owner(admin: Client, member: Any) -> None:
    page = admin.get("/keys/").content.decode()
    assert '<select name="owner"' in page and '<option value="mia">mia</option>' in page
    admin.post("/keys/", {"name": "for mia", "owner": "mia", "priority": ""})
    assert ApiKey.objects.get(name="for mia").owner == member
    mia = Client()
    mia.force_login(member)
    assert 'name="owner"' not in mia.get("/keys/").content.decode()  # a member's keys are their own
    assert [k.name for k in keys.visible_keys(member)] == ["for mia"]
