"""A member sees the budget alerts of their own keys and of themself, and every other kind; admins and viewers see
all (a trial's member read a colleague's spending in the header of every page, and on the Alerts page)."""

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from console.access.keys import create_key
from console.access.models import Member
from console.alerts.models import Alert, Delivery
from console.alerts.rules import rules

pytestmark = pytest.mark.django_db


def test_a_member_sees_only_their_own_budget_alerts(member: Any, admin: Client) -> None:
    bob = User.objects.create_user("bob", "", "a-long-password-2")
    Member.objects.create(user=bob, role="member")
    mine, _ = create_key("mia laptop", member)
    his, _ = create_key("bob laptop", bob)
    found, now = rules(), timezone.now()
    subjects = {
        f"key {mine.pk} today at 100 %": "mia's key spent",
        "member mia today at the rule's threshold": "mia spent",
        f"key {his.pk} today at 100 %": "bob's key spent $0.4200",
        "member bob this month at 100 %": "bob spent $9.9900",
        "deployment llama": "llama failed",
    }
    for subject, message in subjects.items():
        kind = "deployment_failed" if subject.startswith("deployment") else "budget"
        alert = Alert.objects.create(rule=found[kind], subject=subject, message=message, since=now, fired_at=now)
        Delivery.objects.create(
            alert=alert, event="fired", channel="webhook", attempts=3, last_error=f"refused: {message}"
        )

    client = Client()
    client.force_login(member)
    for page in ("/keys/", "/alerts/"):
        html = client.get(page).content.decode()
        assert "mia&#x27;s key spent" in html and "mia spent" in html and "llama failed" in html, page
        assert "bob" not in html and "$0.4200" not in html and "$9.9900" not in html, page
    shown = admin.get("/alerts/").content.decode()
    assert "bob&#x27;s key spent $0.4200" in shown and "bob spent $9.9900" in shown
