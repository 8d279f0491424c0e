"""A daily budget over the monthly one is refused, for a key and for a member, in the API and the console, naming
the daily field: the monthly one would always stop spending first (a trial saved daily 5, monthly 2 without a word)."""

import json
from typing import Any

import pytest
from django.test import Client

from console.access.models import ApiKey, Member

pytestmark = pytest.mark.django_db
JSON = "application/json"
SAID = (
    "daily_budget_usd is 5.00 USD, more than the monthly budget of 2.00 USD, which would stop spending first: lower "
    "the daily budget or raise the monthly one."
)


def test_a_daily_budget_over_the_monthly_one_is_refused(admin: Client, member: Any) -> None:
    body = {"name": "k", "daily_budget_usd": "5", "monthly_budget_usd": "2"}
    refused = admin.post("/api/keys", json.dumps(body), content_type=JSON)
    assert (refused.status_code, refused.json()) == (400, {"detail": SAID}) and not ApiKey.objects.exists()
    made = admin.post("/api/keys", json.dumps({"name": "k", "monthly_budget_usd": "2"}), content_type=JSON).json()
    patched = admin.patch(f"/api/keys/{made['id']}", json.dumps({"daily_budget_usd": "5"}), content_type=JSON)
    assert (patched.status_code, patched.json()) == (400, {"detail": SAID})

    url = f"/api/members/{member.pk}"
    assert admin.patch(url, json.dumps({"daily_budget_usd": "5"}), content_type=JSON).status_code == 200
    later = admin.patch(url, json.dumps({"monthly_budget_usd": "2"}), content_type=JSON)  # the daily one is kept
    assert (later.status_code, later.json()) == (400, {"detail": SAID})
    assert Member.objects.get(user=member).monthly_budget_usd is None
    page = admin.post(
        f"/members/{member.pk}/",
        {"role": "member", "is_active": "on", "daily_budget_usd": "5", "monthly_budget_usd": "2"},
    ).content.decode()
    assert "Daily budget (USD) is 5.00 USD, more than the monthly budget of 2.00 USD" in page  # the form's label
