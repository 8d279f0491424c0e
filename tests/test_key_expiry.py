"""A key's expiry: a time given without a zone is read as UTC, in the JSON API as on the key's page, and a
refused one changes nothing; an expired key's pages say it expired and when, and offer no rotation."""

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from console.access import keys
from console.access.models import ApiKey, Member
from tests.conftest import MEMBER_PASSWORD

pytestmark = pytest.mark.django_db
PASSWORD = MEMBER_PASSWORD
NEW_YEAR_2030 = datetime(2030, 1, 1, tzinfo=UTC)
FUTURE = "expires_at must be in the future (or empty for never)."


@pytest.fixture
def mia(client: Client, member: Any) -> Client:
    client.force_login(member)
    return client


def _patch(client: Client, pk: int, body: dict[str, Any]) -> Any:
    return client.patch(f"/api/keys/{pk}", body, content_type="application/json")


@pytest.mark.parametrize("spelled", ["2030-01-01T00:00:00", "2030-01-01"])
def test_an_expiry_without_a_zone_is_read_as_utc_in_the_json_api(mia: Client, member: Any, spelled: str) -> None:
    row, _ = keys.create_key("laptop", member)
    resp = _patch(mia, row.pk, {"expires_at": spelled})
    assert resp.status_code == 200, resp.content
    assert datetime.fromisoformat(resp.json()["expires_at"].replace("Z", "+00:00")) == NEW_YEAR_2030
    row.refresh_from_db()
    assert row.expires_at == NEW_YEAR_2030


def test_the_key_page_reads_an_expiry_as_utc_too(mia: Client, member: Any) -> None:
    row, _ = keys.create_key("laptop", member)
    assert mia.post(f"/keys/{row.pk}/", {"expires_at": "2030-01-01 00:00"}).status_code == 302
    row.refresh_from_db()
    assert row.expires_at == NEW_YEAR_2030


@pytest.mark.parametrize("spelled", ["2000-01-01T00:00:00", "2000-01-01"])
def test_a_past_expiry_without_a_zone_is_a_400_and_changes_nothing(mia: Client, member: Any, spelled: str) -> None:
    row, _ = keys.create_key("laptop", member, expires_in_days=10, max_tokens_cap=5)
    before = keys.limits_of(row)
    resp = _patch(mia, row.pk, {"expires_at": spelled, "max_tokens_cap": 99})
    assert resp.status_code == 400 and resp.json() == {"detail": FUTURE}
    assert keys.limits_of(ApiKey.objects.get(pk=row.pk)) == before


def test_an_expiry_without_a_zone_past_the_members_ceiling_is_a_400_and_changes_nothing(
    mia: Client, member: Any
) -> None:
    Member.objects.filter(user=member).update(max_key_days=30)
    row, _ = keys.create_key("laptop", member)
    before = keys.limits_of(row)
    resp = _patch(mia, row.pk, {"expires_at": "2030-01-01T00:00:00", "max_tokens_cap": 99})
    assert (resp.status_code, resp.json()) == (
        400,
        {"detail": "expires_at must be at most 30 days away (the limit set for you)."},
    )
    assert keys.limits_of(ApiKey.objects.get(pk=row.pk)) == before


def _expired(member: Any, **limits: Any) -> ApiKey:
    """A key of ``member`` that expired an hour ago, on a whole minute (the pages show minutes)."""
    row, _ = keys.create_key("laptop", member, **limits)
    ago = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=1)
    ApiKey.objects.filter(pk=row.pk).update(expires_at=ago)
    row.refresh_from_db()
    return row


def _minute(at: datetime | None) -> str:
    assert at is not None
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _cell(page: str, pk: int, field: str) -> str:
    """The text of the cell or span ``field`` in the key's row, before any inner tag."""
    row = re.search(rf'<tr id="key-{pk}">(.*?)</tr>', page, re.S)
    assert row, page
    cell = re.search(rf'<(?:td|small)[^>]*data-field="{field}">(.*?)(?:<|$)', row.group(1), re.S)
    assert cell, row.group(1)
    return cell.group(1)


def test_the_keys_list_says_an_expired_key_expired_and_when_a_live_one_expires(mia: Client, member: Any) -> None:
    gone = _expired(member)
    today, _ = keys.create_key("desktop", member)
    ApiKey.objects.filter(pk=today.pk).update(expires_at=timezone.now() + timedelta(hours=2))
    today.refresh_from_db()
    page = mia.get("/keys/").content.decode()
    assert "<th>Status (UTC)</th>" in page
    assert _cell(page, gone.pk, "status") == f"expired {_minute(gone.expires_at)}"
    expires = (_cell(page, today.pk, "status"), _cell(page, today.pk, "expires"))
    assert expires == ("active", f"expires {_minute(today.expires_at)}")


def _status(page: str) -> str:
    found = re.search(r'<td data-field="status">(.*?)</td>', page, re.S)
    assert found, page
    return found.group(1)


def test_an_expired_keys_page_says_so_and_offers_no_rotation_as_the_api_refuses_it(mia: Client, member: Any) -> None:
    live, _ = keys.create_key("desktop", member)
    assert f'action="/keys/{live.pk}/rotate/"' in mia.get(f"/keys/{live.pk}/").content.decode()
    row = _expired(member)
    page = mia.get(f"/keys/{row.pk}/").content.decode()
    assert _status(page) == f"expired {_minute(row.expires_at)} UTC"
    assert f"/keys/{row.pk}/rotate/" not in page and "Rotate key" not in page
    assert 'data-field="expired-note"' in page and f'action="/keys/{row.pk}/revoke/"' in page
    refused = mia.post(f"/api/keys/{row.pk}/rotate", {"grace_seconds": 0}, content_type="application/json")
    assert refused.status_code == 400 and "revoked or expired" in refused.json()["detail"]


def test_an_expired_keys_page_offers_no_old_secret_from_a_rotation_the_gateway_refuses(
    mia: Client, member: Any
) -> None:
    row, _ = keys.create_key("laptop", member)
    keys.rotate_key(row, member, grace_seconds=86_400)
    ApiKey.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(minutes=5))
    row.refresh_from_db()
    assert row.secrets_at() == []
    status = _status(mia.get(f"/keys/{row.pk}/").content.decode())
    assert status.startswith("expired ") and "; rotated " in status and "accepted until" not in status


def test_an_expired_key_given_a_later_expiry_on_its_page_is_active_and_rotatable_again(
    mia: Client, member: Any
) -> None:
    row = _expired(member)
    assert mia.post(f"/keys/{row.pk}/", {"expires_at": "2030-01-01 00:00"}).status_code == 302
    page = mia.get(f"/keys/{row.pk}/").content.decode()
    assert _status(page) == "active" and f'action="/keys/{row.pk}/rotate/"' in page


@pytest.mark.parametrize("spelled", ["9999-12-31T23:59:59-05:00", "9999-12-31T23:59:59", "2200-01-01T00:00:00Z"])
def test_an_expiry_past_the_most_days_is_a_400_never_a_500(admin: Client, admin_user: Any, spelled: str) -> None:
    row, _ = keys.create_key("far", admin_user)
    resp = _patch(admin, row.pk, {"expires_at": spelled})
    assert resp.status_code == 400 and resp.json() == {
        "detail": "expires_at must be within 36,500 days (or empty for never)."
    }
    page = admin.post(f"/keys/{row.pk}/", {"expires_at": spelled.replace("T", " ")})
    assert page.status_code == 200 and "must be within 36,500 days" in page.content.decode()
    assert ApiKey.objects.get(pk=row.pk).expires_at is None
