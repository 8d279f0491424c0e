"""The audit page says what a platform engineer reads: the target's kind in words ("API key 3", "member 2")
and changed values in words (a datetime as "YYYY-MM-DD HH:MM UTC", True/False as on/off, None as none),
while the CSV and JSON exports keep the values as stored, for machines."""

import csv
import io
import json

import pytest
from django.test import Client

from console.audit.models import AuditEntry
from tests.conftest import MEMBER_PASSWORD as PASSWORD

pytestmark = pytest.mark.django_db
JSON = "application/json"
EXPIRY = "2030-12-06T15:30:00Z"


def key_given_an_expiry(root: Client) -> int:
    """A new key whose expiry is then set (a key.limits entry: expires_at [None, EXPIRY]); its id."""
    key = root.post("/api/keys", {"name": "ci"}, content_type=JSON).json()
    assert root.patch(f"/api/keys/{key['id']}", {"expires_at": EXPIRY}, content_type=JSON).status_code == 200
    return int(key["id"])


def test_the_page_names_the_target_kind_and_a_new_expiry_in_words(root: Client) -> None:
    key_id = key_given_an_expiry(root)
    page = root.get("/audit/?action=key.limits").content.decode()
    assert f"(API key {key_id})" in page and "access.apikey" not in page
    assert "<code>expires_at</code>: none → 2030-12-06 15:30 UTC" in page
    assert "2030-12-06T15:30" not in page


def test_the_page_names_a_member_and_reads_a_flag_as_on_or_off(root: Client) -> None:
    bob = root.post(
        "/api/members", {"username": "bob", "password": PASSWORD, "role": "viewer"}, content_type=JSON
    ).json()
    assert root.patch(f"/api/members/{bob['id']}", {"is_active": False}, content_type=JSON).status_code == 200
    page = root.get("/audit/?action=member.active").content.decode()
    assert f"(member {bob['id']})" in page and "auth.user" not in page
    assert "<code>is_active</code>: on → off" in page


def test_a_target_of_a_kind_since_removed_keeps_its_stored_type() -> None:
    for target_type, kind in (("gone.widget", "gone.widget"), ("nodot", "nodot"), ("", "")):
        assert AuditEntry(target_type=target_type).target_kind() == kind
    assert AuditEntry(target_type="deployments.deployment").target_kind() == "deployment"


def test_values_read_in_words_and_only_datetimes_with_an_offset_become_times() -> None:
    entry = AuditEntry(
        changes={
            "until": "2026-12-06T15:30:00.123+02:00",
            "from": ["2026-12-06T15:30:00+00:00", None],
            "recreate": False,
            "woken": True,
            "why": "",
            "day": "2026-12-06",
            "naive": "2026-12-06T15:30:00",
            "odd": "2026-13-40T15:30:00Z",
            "count": 0,
            "extra_args": [],
            "allowed_models": ["a", "b", "c"],
            "models": [[], ["smol"]],
        }
    )
    assert entry.changes_in_words() == [
        ("until", "2026-12-06 13:30 UTC"),
        ("from", "2026-12-06 15:30 UTC → none"),
        ("recreate", "off"),
        ("woken", "on"),
        ("why", "none"),
        ("day", "2026-12-06"),
        ("naive", "2026-12-06T15:30:00"),
        ("odd", "2026-13-40T15:30:00Z"),
        ("count", "0"),
        ("extra_args", "none"),
        ("allowed_models", "a, b, c"),
        ("models", "none → smol"),
    ]


def test_the_exports_keep_the_stored_type_and_values(root: Client) -> None:
    key_id = key_given_an_expiry(root)
    [exported] = root.get("/audit/export.json?action=key.limits").json()
    assert (exported["target_type"], exported["target_id"]) == ("access.apikey", str(key_id))
    assert exported["changes"] == {"expires_at": [None, EXPIRY]}
    [row] = csv.DictReader(io.StringIO(root.get("/audit/export.csv?action=key.limits").content.decode()))
    assert row["target_type"] == "access.apikey"
    assert json.loads(row["changes"]) == {"expires_at": [None, EXPIRY]}


def test_a_filter_that_matches_nothing_says_so(root: Client) -> None:
    page = root.get("/audit/?target=nobody-by-this-name").content.decode()
    assert '<td colspan="6">No entries match.</td>' in page
