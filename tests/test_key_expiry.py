"""A key's expiry: a time given without a zone is read as UTC, in the JSON API as on the key's page, and a
refused one changes nothing."""

from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from console.access import keys
from console.access.models import ApiKey, Member

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-password-1"
NEW_YEAR_2030 = datetime(2030, 1, 1, tzinfo=UTC)
FUTURE = "expires_at must be in the future (or empty for never)."


@pytest.fixture
def member(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("mia", "", PASSWORD)
    Member.objects.create(user=user, role="member")
    return user


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
        400, {"detail": "expires_at must be at most 30 days away (the limit set for you)."}
    )  # fmt: skip
    assert keys.limits_of(ApiKey.objects.get(pk=row.pk)) == before
