"""A key refused for a budget does not read "active" alone: the keys list, its page and the JSON API say the latest
budget refusal (within ten minutes today) as the gateway's 429 said it, with when the budget renews (a trial's key
page said "active" while every request of it was refused)."""

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from console.access import key_activity, keys
from console.access.key_activity import budget_words
from console.observability.models import RequestLog

pytestmark = pytest.mark.django_db
SPENT = "This key's daily budget of $1.00 is spent; it renews in 3,600 s (at 2026-12-08 00:00 UTC)."


def refused(key: Any, error: str, ago: float = 1) -> None:
    RequestLog.objects.create(
        created_at=timezone.now() - timedelta(seconds=ago), api_key=key, model="smol", surface="openai",
        endpoint="/v1/chat/completions", status=429, duration_seconds=0, error=error,
    )  # fmt: skip


def test_a_key_refused_for_its_budget_says_so_where_it_said_active(admin: Client, admin_user: Any) -> None:
    key, _ = keys.create_key("ci", admin_user, daily_budget_usd=Decimal("1.00"))
    refused(key, "This API key's limit of 20 requests per minute is reached; retry in 3 s.")  # a limit, not a budget
    refused(key, SPENT, ago=key_activity.REFUSED_WITHIN + 60)  # long ago: a budget raised since, or nobody asking
    assert 'data-field="budget_refusal"' not in admin.get(f"/keys/{key.pk}/").content.decode()
    assert admin.get("/api/keys").json()[0]["budget_refusal"] is None

    refused(key, SPENT)
    words = "This key&#x27;s daily budget of $1.00 is spent; it renews 2026-12-08 00:00 UTC"
    page = admin.get(f"/keys/{key.pk}/").content.decode()
    assert f'active, <strong class="warn" data-field="budget_refusal">but refused: {words}</strong>' in page
    listed = f'<span class="warn" data-field="budget_refusal" title="{words}">refused for a budget</span>'
    assert listed in admin.get("/keys/").content.decode()  # short in the list, its words on hover and its page
    assert admin.get("/api/keys").json()[0]["budget_refusal"] == budget_words(SPENT)  # its countdown is stale

    keys.revoke_key(key, admin_user)
    assert 'data-field="budget_refusal"' not in admin.get("/keys/").content.decode()  # revoked says revoked


def test_budget_words_drop_the_countdown_the_log_kept() -> None:
    assert budget_words(SPENT) == "This key's daily budget of $1.00 is spent; it renews 2026-12-08 00:00 UTC"
    owner = (
        "The daily budget of this key's owner (over all their keys) of $2.00 has $0.01 left, less than this request "
        "may cost (up to $0.02: its prompt and output limit); ask for fewer output tokens (max_tokens) to pass now; "
        "it renews in 42 s."
    )
    assert budget_words(owner).endswith("to pass now; it renews within a minute")
    assert budget_words(None) == "" and budget_words("odd") == "odd"
