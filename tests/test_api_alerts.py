"""The Alerts page under /api: open and resolved alerts (a member sees only their own budget alerts), the rules
(admins tune them within their units' ranges), where alerts go (the webhook never whole in any answer or audit
entry) and a test sent there; bad input a 400 or 404 naming what is wrong, with nothing written."""

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone

from console.access.keys import create_key
from console.access.models import Member
from console.alerts.models import Alert, AlertRule, Destination
from console.alerts.rules import KINDS, rules
from console.audit.models import AuditEntry
from tests.alert_receivers import Mailbox, Webhook, smtp, webhook
from tests.conftest import free_port

pytestmark = pytest.mark.django_db
__all__ = ["smtp", "webhook"]  # fixtures
SECRET = "T000/B000/XXXXsecretXXXX"


@pytest.fixture
def member_client(member: Any) -> Client:
    signed_in = Client()
    signed_in.force_login(member)
    return signed_in


def mail_to(port: int) -> override_settings:
    """Email through a local SMTP server on ``port`` (tests.alert_receivers.smtp, or none there)."""
    return override_settings(
        EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend", EMAIL_HOST="127.0.0.1", EMAIL_PORT=port
    )


def send(client: Client, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    return getattr(client, method)(url, body or {}, content_type="application/json")


def test_it_lists_open_and_resolved_alerts_and_a_member_sees_only_their_own_budget_alerts(
    admin: Client, member: Any, member_client: Client
) -> None:
    bob = User.objects.create_user("bob", "", "a-long-password-2")
    Member.objects.create(user=bob, role="member")
    mine, _ = create_key("mia laptop", member)
    his, _ = create_key("bob laptop", bob)
    found, now = rules(), timezone.now()
    made = [
        ("budget", f"key {mine.pk} today at 100 %", "mia's key spent", None),
        ("budget", f"key {his.pk} today at 100 %", "bob's key spent $0.42", None),
        ("budget", "member bob this month at 100 %", "bob spent $9.99", now),
        ("deployment_failed", "deployment llama", "llama failed", now),
    ]
    for kind, subject, message, resolved in made:
        since = now - timedelta(minutes=5)
        Alert.objects.create(
            rule=found[kind], subject=subject, message=message, since=since, fired_at=since, resolved_at=resolved
        )
    Alert.objects.create(rule=found["kv_cache_high"], subject="replica r", message="not yet fired", since=now)

    everything = admin.get("/api/alerts").json()
    assert [a["message"] for a in everything["open"]] == ["mia's key spent", "bob's key spent $0.42"]
    assert {a["message"] for a in everything["resolved"]} == {"bob spent $9.99", "llama failed"}
    first = everything["open"][0]
    assert (first["kind"], first["title"], first["subject"]) == ("budget", KINDS["budget"].title, made[0][1])
    assert first["about"] == f"key {mine.prefix} (mia laptop) today at 100 %" and first["resolved_at"] is None
    assert first["since"] and first["fired_at"]

    theirs = member_client.get("/api/alerts")
    assert theirs.status_code == 200
    assert [a["message"] for a in theirs.json()["open"]] == ["mia's key spent"]
    assert [a["message"] for a in theirs.json()["resolved"]] == ["llama failed"]
    assert "bob" not in theirs.content.decode()


def test_it_lists_every_rule_with_its_unit_range_and_default(member_client: Client) -> None:
    listed = {r["kind"]: r for r in member_client.get("/api/alerts/rules").json()}
    assert list(listed) == list(KINDS)
    kv = listed["kv_cache_high"]
    assert (kv["unit"], kv["least"], kv["most"], kv["whole"], kv["enabled"]) == ("ratio 0–1", 0, 1, False, True)
    assert kv["threshold"] == kv["default"]["threshold"] == 0.9 and kv["default"]["repeat_minutes"] == 60
    assert listed["requests_waiting"]["whole"] and listed["weights_disk"]["most"] is None


def test_an_admin_tunes_a_rule_and_only_a_change_is_audited(admin: Client) -> None:
    resp = send(admin, "patch", "/api/alerts/rules/kv_cache_high", {"threshold": 0.75, "enabled": False})
    assert resp.status_code == 200, resp.content
    assert (resp.json()["threshold"], resp.json()["enabled"], resp.json()["for_minutes"]) == (0.75, False, 5)
    rule = AlertRule.objects.get(kind="kv_cache_high")
    assert (rule.threshold, rule.enabled, rule.for_minutes, rule.repeat_minutes) == (0.75, False, 5, 60)
    assert send(admin, "patch", "/api/alerts/rules/kv_cache_high", {"threshold": 0.75}).status_code == 200
    [entry] = AuditEntry.objects.filter(action="alerts.rule")
    assert (entry.actor_name, entry.target_name) == ("admin", "rule kv_cache_high")
    assert entry.changes == {"enabled": [True, False], "threshold": [0.9, 0.75]}


@pytest.mark.parametrize(
    ("kind", "body", "said"),
    [
        ("kv_cache_high", {"threshold": 1.5}, "threshold: At most 1; its unit: ratio 0–1."),
        ("requests_waiting", {"threshold": 2.5}, "threshold: A whole number: the threshold counts requests."),
        ("budget", {"threshold": 0.5}, "threshold: At least 1; its unit: percent (and 100 %)."),
        ("error_rate", {"threshold": -1}, "threshold: Must be 0 or more."),
        ("error_rate", {"for_minutes": 2000}, "for_minutes: At most 1,440 minutes (a day)."),
        ("error_rate", {"repeat_minutes": 0}, "repeat_minutes: Repeat at most once a minute (1 or more)."),
        ("error_rate", {"threshold": None}, "threshold: give a value, or leave the field out to keep it"),
        ("error_rate", {"threshold": "0.1"}, "threshold: Input should be a valid number"),
        ("error_rate", {"enabled": "yes"}, "enabled: Input should be a valid boolean"),
        (
            "replica_not_ready",
            {"threshold": 5},
            "threshold: the replica_not_ready rule has no threshold; leave the field out",
        ),
    ],
)
def test_a_rule_out_of_its_range_is_a_400_naming_the_field_and_nothing_changes(
    admin: Client, kind: str, body: dict[str, Any], said: str
) -> None:
    before = {r.kind: (r.enabled, r.threshold, r.for_minutes, r.repeat_minutes) for r in rules().values()}
    resp = send(
        admin, "patch", f"/api/alerts/rules/{kind}", body | {"enabled": False} if "enabled" not in body else body
    )
    assert resp.status_code == 400 and resp.json() == {"detail": said}
    assert {r.kind: (r.enabled, r.threshold, r.for_minutes, r.repeat_minutes) for r in rules().values()} == before
    assert not AuditEntry.objects.filter(action="alerts.rule").exists()


def test_an_unknown_kind_is_a_404_naming_the_kinds(admin: Client) -> None:
    resp = send(admin, "patch", "/api/alerts/rules/gpu_on_fire", {"threshold": 1})
    assert resp.status_code == 404
    assert resp.json() == {"detail": f"No kind of alert is called 'gpu_on_fire'; the kinds: {', '.join(KINDS)}."}


def test_the_destination_is_set_kept_and_cleared_and_its_secret_is_never_answered(
    admin: Client, member_client: Client
) -> None:
    url = f"https://hooks.example.com/{SECRET}"
    answers = [send(admin, "put", "/api/alerts/destination", {"webhook_url": url, "email_to": " a@b.co,c@d.co "})]
    assert answers[0].json() | {"smtp_server": ""} == {
        "webhook": "https://hooks.example.com/…",
        "email_to": "a@b.co, c@d.co",
        "smtp_server": "",
    }
    answers.append(send(admin, "put", "/api/alerts/destination", {"email_to": "ops@b.co"}))  # the webhook kept
    assert Destination.current().webhook_url == url and Destination.current().email_to == "ops@b.co"
    answers += [admin.get("/api/alerts/destination"), member_client.get("/api/alerts/destination")]
    answers.append(send(admin, "put", "/api/alerts/destination", {"webhook_url": "https://hooks.example.com/T1/other"}))
    answers.append(send(admin, "put", "/api/alerts/destination", {"webhook_url": None, "email_to": ""}))
    assert Destination.current().webhook_url == "" and Destination.current().email_to == ""
    assert [a.status_code for a in answers] == [200] * 6
    said = [e.changes for e in AuditEntry.objects.filter(action="alerts.destination").order_by("pk")]
    assert [c.get("webhook_url") for c in said] == [
        ["none", "https://hooks.example.com/…"],
        None,
        ["https://hooks.example.com/…", "https://hooks.example.com/… (another path)"],
        ["https://hooks.example.com/…", "none"],
    ]
    for shown in [a.content.decode() for a in answers] + [json.dumps(said)]:
        assert "T000" not in shown and "T1/other" not in shown


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"webhook_url": "not a url"}, "webhook_url: Enter a valid URL."),
        ({"webhook_url": "ftp://hooks.example.com/x"}, "webhook_url: A webhook URL is http or https, not ftp."),
        ({"webhook_url": "https://hooks.example.com:99999/x"}, "webhook_url: A webhook URL's port is 1 to 65535."),
        ({"email_to": "a@b.co, nope"}, "email_to: nope is not an email address."),
        ({"email": "a@b.co"}, "email: Extra inputs are not permitted"),
    ],
)
def test_a_bad_destination_is_a_400_naming_the_field_and_keeps_the_old_one(
    admin: Client, body: dict[str, Any], said: str
) -> None:
    Destination.objects.update_or_create(pk=1, defaults={"webhook_url": f"https://h.example.com/{SECRET}"})
    resp = send(admin, "put", "/api/alerts/destination", body)
    assert resp.status_code == 400 and resp.json() == {"detail": said}
    found = Destination.current()
    assert (found.webhook_url, found.email_to) == (f"https://h.example.com/{SECRET}", "")
    assert SECRET not in resp.content.decode() and not AuditEntry.objects.filter(action__startswith="alerts.").exists()


def test_an_admin_sends_a_test_and_reads_what_each_channel_did(
    admin: Client, webhook: Webhook, smtp: tuple[Mailbox, int]
) -> None:
    assert send(admin, "post", "/api/alerts/destination/test").json() == {
        "detail": "Nothing to test: set a webhook URL or an email address first."
    }
    Destination.objects.update_or_create(
        pk=1, defaults={"webhook_url": f"{webhook.url}/{SECRET}", "email_to": "o@p.co"}
    )
    box, port = smtp
    with mail_to(port):
        resp = send(admin, "post", "/api/alerts/destination/test")
    assert resp.status_code == 200 and resp.json() == [
        {"channel": "webhook", "to": f"{webhook.url}/…", "sent": True, "error": ""},
        {"channel": "email", "to": "o@p.co", "sent": True, "error": ""},
    ]
    assert [path for path, _ in webhook.posts] == [f"/{SECRET}"] and len(box.messages) == 1
    entry = AuditEntry.objects.get(action="alerts.test")
    assert (entry.actor_name, entry.changes) == ("admin", {"webhook": "sent", "email": "sent"})


def test_a_test_that_fails_says_why_without_the_webhooks_secret(admin: Client, webhook: Webhook) -> None:
    Destination.objects.update_or_create(
        pk=1, defaults={"webhook_url": f"{webhook.url}/{SECRET}", "email_to": "o@p.co"}
    )
    webhook.failures = [500]
    with mail_to(free_port()):
        resp = send(admin, "post", "/api/alerts/destination/test")
    hook, mail = resp.json()
    assert hook == {
        "channel": "webhook",
        "to": f"{webhook.url}/…",
        "sent": False,
        "error": f"{webhook.url}/… answered 500",
    }
    assert not mail["sent"] and mail["error"].startswith("ConnectionRefusedError")
    changes = AuditEntry.objects.get(action="alerts.test").changes
    assert SECRET not in resp.content.decode() and SECRET not in json.dumps(changes)


def test_a_members_alert_writes_are_403_in_the_apis_shape(member_client: Client, webhook: Webhook) -> None:
    Destination.objects.update_or_create(pk=1, defaults={"webhook_url": f"{webhook.url}/{SECRET}"})
    refused = [
        send(member_client, "patch", "/api/alerts/rules/error_rate", {"enabled": False}),
        send(member_client, "put", "/api/alerts/destination", {"email_to": "m@b.co"}),
        send(member_client, "post", "/api/alerts/destination/test"),
    ]
    for resp in refused:
        assert resp.status_code == 403 and resp.json() == {"detail": "This is for admins; you are a member."}
    assert rules()["error_rate"].enabled and Destination.current().email_to == "" and not webhook.posts
    assert not AuditEntry.objects.filter(action__startswith="alerts.").exists()
