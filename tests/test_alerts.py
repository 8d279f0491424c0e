"""Alerts (console.alerts) against real receivers the tests start: a webhook HTTP server and an SMTP server
(aiosmtpd). Each rule fires once, repeats at its interval while it holds and resolves with a message; a failing
webhook is retried with backoff and its failures shown; a webhook URL's secret is never shown or logged. The
conditions that need live engines and Celery: tests/test_alerts_live.py."""

import json
import logging
import re
import socket
import time
from datetime import timedelta
from decimal import Decimal

import pytest
import redis
from django.conf import settings
from django.test import Client, override_settings
from django.utils import timezone

from console.access.keys import create_key
from console.alerts import delivery
from console.alerts.evaluate import evaluate
from console.alerts.models import Alert, AlertRule, Delivery, Destination
from console.alerts.rules import KINDS, rules
from console.audit.models import AuditEntry
from console.deployments.models import Deployment, Replica
from console.observability.models import RequestLog, ServiceLevel
from console.observability.spent import key_counters, periods
from tests.alert_receivers import Mailbox, Webhook, smtp, webhook
from tests.conftest import free_port, serving

pytestmark = pytest.mark.django_db
__all__ = ["smtp", "webhook"]  # fixtures
SECRET = "T000/B000/XXXXsecretXXXX"
TO = "o@p.co"


def sent(now: float) -> list[Delivery]:
    """Evaluate at ``now`` and try each delivery made until it is sent or given up (the backoff's waits are
    Celery's: tests/test_alerts_live.py)."""
    made = evaluate(now)
    for delivery_id in made:
        while delivery.attempt(delivery_id) is not None:
            pass
    return list(Delivery.objects.filter(pk__in=made).order_by("pk"))


def tune(kind: str, **fields: float) -> None:
    AlertRule.objects.filter(pk=rules()[kind].pk).update(**fields)


def only(kind: str) -> None:
    """Every rule off but ``kind`` (the others' conditions may hold on a test box: its disk, beat)."""
    rules()
    AlertRule.objects.exclude(kind=kind).update(enabled=False)


def email_settings(port: int) -> override_settings:
    return override_settings(
        EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend", EMAIL_HOST="127.0.0.1", EMAIL_PORT=port
    )


def spend(key_id: int, usd: str, now: float) -> None:
    """What the gateway's charges leave in the key's day counter (nano-USD, console.observability.spent)."""
    day, _ = periods(now)
    redis.Redis.from_url(settings.REDIS_URL).set(f"{key_counters(key_id)}:usd:{day}", int(Decimal(usd) * 10**9))


def test_every_kind_has_a_default_rule_an_admin_sees() -> None:
    found = rules()
    assert set(found) == set(KINDS) and all(r.enabled for r in found.values())
    assert found["budget"].threshold == 80 and found["replica_not_ready"].for_minutes == 5


def test_a_budget_crossed_fires_once_at_80_and_100_percent_repeats_and_resolves(
    admin_user: object, webhook: Webhook, smtp: tuple[Mailbox, int]
) -> None:
    box, port = smtp
    # the row may be there already: a web server or the session's worker made it (Destination.current)
    Destination.objects.update_or_create(
        pk=1, defaults={"webhook_url": f"{webhook.url}/hooks/{SECRET}", "email_to": "ops@example.com"}
    )
    only("budget")
    tune("budget", repeat_minutes=60)
    key, _ = create_key("ci", admin_user, daily_budget_usd=Decimal("1.00"))
    low = f"key {key.pk} today at the rule's threshold"  # its subject: its id, not its prefix; the level, not 80 %
    now = time.time()
    if now % 86_400 > 86_400 - 2 * 3600:  # its 62 minutes must stay in one UTC day: a budget is the day's
        now += 2 * 3600  # (run at 23:16 UTC, the look at +59 min read the next day's 0 spent and resolved)
    with email_settings(port):
        spend(key.pk, "0.50", now)
        assert sent(now) == []
        spend(key.pk, "0.85", now)
        fired = sent(now)
        assert [(d.event, d.channel) for d in fired] == [("fired", "webhook"), ("fired", "email")]
        assert all(d.sent_at and d.attempts == 1 for d in fired)
        [(path, body)] = webhook.posts
        assert path == f"/hooks/{SECRET}" and body["schema"] == "hearth.alert/1" and body["event"] == "fired"
        assert body["alert"]["kind"] == "budget" and body["alert"]["subject"] == low
        name = socket.gethostname()  # no HEARTH_HOSTNAME: the machine's name says which box sent it
        assert body["appliance"] == name and body["text"] == (
            f"[Hearth {name}] FIRING: Budget spent: key {key.prefix} (ci) spent $0.8500 today: 85 % of its $1.00 "
            "budget, at or over 80 %"
        )
        [mail] = box.messages  # its subject what it is about, not the whole message (a trial's held a traceback)
        assert mail["To"] == "ops@example.com"
        said = f"key {key.prefix} (ci) today at 80 %"  # as people read it: its prefix and name, the percent of now
        assert mail["Subject"] == f"[Hearth {name}] FIRING: Budget spent: {said}" and body["alert"]["about"] == said
        assert f"\r\nAbout: {said}\r\n" in str(mail.get_payload())
        assert body["console_url"] == "" and "Console:" not in str(mail.get_payload())  # no HEARTH_HOSTNAME to link
        assert sent(now + 30) == [] and sent(now + 59 * 60) == []  # nothing twice within the repeat interval
        assert [d.event for d in sent(now + 60 * 60)] == ["repeated", "repeated"]
        spend(key.pk, "1.20", now)
        crossed = sent(now + 61 * 60)
        assert [d.event for d in crossed] == ["fired", "fired"]
        assert webhook.bodies()[-1]["alert"]["subject"].endswith("today at 100 %")
        spend(key.pk, "0", now)
        resolved = sent(now + 62 * 60)
        assert [d.event for d in resolved] == ["resolved"] * 4
        said = {b["alert"]["subject"]: b["text"] for b in webhook.bodies()[-2:]}
        assert said[f"key {key.pk} today at 100 %"].startswith(
            f"[Hearth {name}] RESOLVED: Budget spent: Resolved (the condition ended); last seen while it held: "
            f"key {key.prefix} (ci) spent $1.2000"
        )
        assert len(box.messages) == 1 + 1 + 1 + 2
        ended = str(box.messages[-1].get_payload())
        assert "\r\nSince: " in ended and " (held from then)\r\nResolved: " in ended and "Resolved: " not in str(mail)
    assert Alert.objects.filter(resolved_at=None).count() == 0


def test_a_condition_must_hold_its_minutes_before_firing_and_one_that_ends_sooner_never_fires(
    webhook: Webhook,
) -> None:
    Destination.objects.update_or_create(pk=1, defaults={"webhook_url": webhook.url})
    only("weights_disk")
    tune("weights_disk", threshold=1e12, for_minutes=2)  # no disk has a zettabyte free: it holds
    now = time.time()
    assert sent(now) == [] and sent(now + 60) == []
    assert [d.event for d in sent(now + 121)] == ["fired"]
    assert "GiB free, under 1e+12 GiB" in webhook.bodies()[0]["alert"]["message"]
    tune("weights_disk", threshold=0)
    assert [d.event for d in sent(now + 180)] == ["resolved"]
    tune("weights_disk", threshold=1e12)
    assert sent(now + 200) == []  # pending again, for 2 minutes
    tune("weights_disk", threshold=0)
    assert sent(now + 260) == [] and not Alert.objects.filter(resolved_at=None).exists()  # dropped, never fired
    assert len(webhook.posts) == 2


def test_a_rule_turned_off_resolves_its_alerts(webhook: Webhook) -> None:
    Destination.objects.update_or_create(pk=1, defaults={"webhook_url": webhook.url})
    only("weights_disk")
    tune("weights_disk", threshold=1e12)
    now = time.time()
    assert [d.event for d in sent(now)] == ["fired"]
    tune("weights_disk", enabled=False)
    assert [d.event for d in sent(now + 1)] == ["resolved"]
    said = webhook.bodies()[-1]["alert"]["message"]
    assert said.startswith("Resolved (the rule was turned off); last seen while it held: ")


def test_a_failing_webhook_is_retried_with_backoff_its_failures_shown_and_its_secret_never(
    admin: Client, webhook: Webhook, caplog: pytest.LogCaptureFixture
) -> None:
    Destination.objects.update_or_create(pk=1, defaults={"webhook_url": f"{webhook.url}/hooks/{SECRET}?token=abc123"})
    only("weights_disk")
    tune("weights_disk", threshold=1e12)
    webhook.failures = [500, 503]
    [delivery_id] = evaluate(time.time())
    with caplog.at_level(logging.WARNING):
        assert delivery.attempt(delivery_id) == delivery.BACKOFF
        assert delivery.attempt(delivery_id) == 2 * delivery.BACKOFF
        page = admin.get("/alerts/").content.decode()
        assert delivery.attempt(delivery_id) is None
    row = Delivery.objects.get(pk=delivery_id)
    assert row.sent_at and row.attempts == 3 and row.last_error.endswith("answered 503")  # kept: it was late
    assert len(webhook.posts) == 1
    sent = re.search(r'<table data-table="failures">(.*?)</table>', admin.get("/alerts/").content.decode(), re.S)
    assert sent and f"sent after retries, {row.sent_at:%H:%M:%S} UTC" in sent.group(1)  # not gone once sent
    failures = re.search(r'<table data-table="failures">(.*?)</table>', page, re.S)
    assert failures and f"{webhook.url}/… answered 503" in failures.group(1) and "retrying" in failures.group(1)
    assert f"<code>{webhook.url}/…</code>" in page
    for said in (page, caplog.text, json.dumps(list(Delivery.objects.values()), default=str)):
        assert SECRET not in said and "abc123" not in said and "hooks" not in said


def test_a_webhook_that_never_answers_is_given_up_after_its_tries(webhook: Webhook) -> None:
    webhook.server.shutdown()
    webhook.server.server_close()
    Destination.objects.update_or_create(pk=1, defaults={"webhook_url": f"{webhook.url}/{SECRET}"})
    only("weights_disk")
    tune("weights_disk", threshold=1e12)
    [d] = sent(time.time())
    assert d.given_up and d.attempts == delivery.MAX_ATTEMPTS and d.sent_at is None
    assert d.last_error.startswith("ConnectError") and SECRET not in d.last_error


def test_only_an_admin_tunes_a_rule_and_bad_numbers_are_refused(admin: Client, client: Client, member: object) -> None:
    resp = admin.post(
        "/alerts/rules/kv_cache_high/",
        {
            "kv_cache_high-enabled": "on",
            "kv_cache_high-threshold": "0.8",
            "kv_cache_high-for_minutes": "2",
            "kv_cache_high-repeat_minutes": "30",
        },
    )
    assert resp.status_code == 302
    rule = AlertRule.objects.get(kind="kv_cache_high")
    assert (rule.threshold, rule.for_minutes, rule.repeat_minutes) == (0.8, 2, 30)
    resp = admin.post(
        "/alerts/rules/kv_cache_high/",
        {
            "kv_cache_high-threshold": "-1",
            "kv_cache_high-for_minutes": "2",
            "kv_cache_high-repeat_minutes": "0",
        },
        follow=True,
    )
    page = resp.content.decode()
    assert "not saved" in page and "Must be 0 or more." in page and "Repeat at most once a minute" in page
    assert AlertRule.objects.get(kind="kv_cache_high").threshold == 0.8
    assert admin.post("/alerts/rules/nonsense/", {}).status_code == 404
    client.force_login(member)  # type: ignore[arg-type]
    assert client.get("/alerts/").status_code == 200
    assert client.post("/alerts/rules/kv_cache_high/", {"kv_cache_high-threshold": "0.1"}).status_code == 403


@pytest.mark.parametrize(
    ("kind", "typed", "said"),
    [
        ("requests_waiting", "2.5", "A whole number: the threshold counts requests."),
        ("requests_waiting", "0", "At least 1; its unit: requests."),
        ("deployment_failed", "0", "At least 1; its unit: restarts in a row."),
        ("budget", "500", "At most 100; its unit: percent (and 100 %)."),
        ("monitoring_stale", "0.5", "At least 1; its unit: scrape intervals."),
    ],
)
def test_a_threshold_that_fires_always_or_never_is_refused(admin: Client, kind: str, typed: str, said: str) -> None:
    """A fresh user's trial saved half a request, 0 restarts in a row and 500 % of a budget."""
    before = rules()[kind].threshold
    fields = {f"{kind}-threshold": typed, f"{kind}-for_minutes": "5", f"{kind}-repeat_minutes": "60"}
    page = admin.post(f"/alerts/rules/{kind}/", fields, follow=True).content.decode()
    assert "not saved" in page and said in page
    assert rules()[kind].threshold == before


def test_the_destination_keeps_its_webhook_unless_told_and_refuses_a_bad_address(admin: Client) -> None:
    admin.post("/alerts/destination/", {"webhook_url": f"https://hooks.example.com/{SECRET}", "email_to": "a@b.co"})
    admin.post("/alerts/destination/", {"webhook_url": "", "email_to": "a@b.co, c@d.co"})
    found = Destination.current()
    assert found.webhook_url.endswith(SECRET) and found.email_to == "a@b.co, c@d.co"
    page = admin.post("/alerts/destination/", {"email_to": "not an address"}, follow=True).content.decode()
    assert "not an address is not an email address." in page and SECRET not in page
    admin.post("/alerts/destination/", {"webhook_url": "https://hooks.example.com/T1/B1/other", "email_to": ""})
    admin.post("/alerts/destination/", {"clear_webhook": "1", "email_to": ""})
    assert Destination.current().webhook_url == ""
    said = [e.changes.get("webhook_url") for e in AuditEntry.objects.filter(action="alerts.destination").order_by("pk")]
    assert said == [
        ["none", "https://hooks.example.com/…"],
        None,  # kept (the refused address after it is not recorded)
        ["https://hooks.example.com/…", "https://hooks.example.com/… (another path)"],  # the secret changed, unsaid
        ["https://hooks.example.com/…", "none"],
    ]


def test_an_admin_sends_a_test_to_each_destination_and_the_page_says_what_each_did(
    admin: Client, client: Client, member: object, webhook: Webhook, smtp: tuple[Mailbox, int]
) -> None:
    """The Alerts page's "Send a test": the webhook gets a hearth.alert/1 body with the event "test", the mailbox a
    message saying so; no alert or delivery is made, and the audit log has the outcome."""
    box, port = smtp
    page = admin.get("/alerts/").content.decode()
    assert "Send a test" not in page  # nothing set up to test
    assert "Alerts reach no one outside this console: no webhook or email is set." in page  # said at the top
    assert "Nothing to test" in admin.post("/alerts/test/", follow=True).content.decode()
    Destination.objects.update_or_create(pk=1, defaults={"webhook_url": f"{webhook.url}/{SECRET}", "email_to": TO})
    page = admin.get("/alerts/").content.decode()
    assert "Send a test" in page and f"through the SMTP server <code>{settings.EMAIL_HOST}:" in page
    assert 'data-field="nowhere"' not in page
    assert "Messages carry no link to this page while <code>HEARTH_HOSTNAME</code> is unset" in page
    with override_settings(HEARTH_HOSTNAME="hearth.example.com"):
        assert 'data-field="no-console-url"' not in admin.get("/alerts/").content.decode()
    with email_settings(port):
        page = admin.post("/alerts/test/", follow=True).content.decode()
    assert f"Test sent by webhook ({webhook.url}/…): it was accepted." in page
    assert "Test sent by email (o@p.co): the SMTP server accepted it." in page
    [(path, body)] = webhook.posts
    assert path == f"/{SECRET}" and body["schema"] == "hearth.alert/1" and body["event"] == "test"
    assert body["alert"]["kind"] == "test" and body["text"].startswith(f"[Hearth {socket.gethostname()}] TEST: ")
    [mail] = box.messages
    assert (
        mail["To"] == "o@p.co" and str(mail["Subject"]) == f"[Hearth {socket.gethostname()}] TEST: alert destinations"
    )
    assert not Alert.objects.exists() and not Delivery.objects.exists()
    entry = AuditEntry.objects.filter(action="alerts.test").get()
    assert entry.changes == {"webhook": "sent", "email": "sent"} and SECRET not in page
    client.force_login(member)  # type: ignore[arg-type]
    assert client.post("/alerts/test/").status_code == 403 and len(webhook.posts) == 1


def test_a_test_that_fails_says_why_without_the_webhooks_secret(
    admin: Client, webhook: Webhook, caplog: pytest.LogCaptureFixture
) -> None:
    Destination.objects.update_or_create(pk=1, defaults={"webhook_url": f"{webhook.url}/{SECRET}", "email_to": TO})
    webhook.failures = [500]
    closed = free_port()  # no SMTP server there
    with email_settings(closed), caplog.at_level(logging.WARNING):
        page = admin.post("/alerts/test/", follow=True).content.decode()
    assert f"The test by webhook ({webhook.url}/…) failed: {webhook.url}/… answered 500" in page
    server = f"the SMTP server 127.0.0.1:{closed} (EMAIL_HOST and EMAIL_PORT in .env; docs/alerts.md)"
    assert f"The test by email (o@p.co) failed at {server}: ConnectionRefusedError" in page
    assert webhook.failures == [] and not Delivery.objects.exists()
    changes = AuditEntry.objects.get(action="alerts.test").changes
    assert changes["webhook"] == f"{webhook.url}/… answered 500" and changes["email"].startswith("ConnectionRefused")
    for said in (page, caplog.text, json.dumps(changes)):
        assert SECRET not in said


def test_the_header_lists_what_fires_on_every_page_until_it_resolves(admin: Client) -> None:
    only("weights_disk")
    tune("weights_disk", threshold=1e12)
    now = time.time()
    evaluate(now)
    page = admin.get("/keys/").content.decode()
    listed = re.search(r'<div class="liveness alerts" data-field="alerts">(.*?)</div>', page, re.S)
    assert listed and "1 alert firing" in listed.group(1) and 'data-alert="weights_disk"' in listed.group(1)
    assert "GiB free, under 1e+12 GiB" in listed.group(1)
    tune("weights_disk", threshold=0)
    evaluate(now + 1)
    assert 'data-field="alerts"' not in admin.get("/keys/").content.decode()


def requests_of(model: str, n: int, **fields: object) -> None:
    RequestLog.objects.bulk_create(
        RequestLog(
            **{
                "model": model,
                "surface": "openai",
                "endpoint": "chat",
                "status": 200,
                "duration_seconds": 1.0,
                **fields,
            }
        )
        for _ in range(n)
    )


def test_ttft_over_the_slo_fires_on_a_burn_over_the_window_not_on_one_slow_request(webhook: Webhook) -> None:
    Destination.objects.update_or_create(pk=1, defaults={"webhook_url": webhook.url})
    only("ttft_slo_burn")
    serving("llama")
    ServiceLevel.objects.create(deployment=Deployment.objects.get(name="llama"), ttft_seconds=0.5)
    requests_of("llama", 1, ttft_seconds=9.0)
    now = time.time()
    assert sent(now) == []  # one slow request is no trend (fewer than MIN_REQUESTS in the window)
    requests_of("llama", 97, ttft_seconds=0.2)
    assert sent(now + 1) == []  # 1 of 98 over: 1.02 %, under 2× the 1 % a p99 allows
    requests_of("llama", 1, ttft_seconds=9.0)
    assert [d.event for d in sent(now + 2)] == ["fired"]  # 2 of 99: 2.02 %
    assert webhook.bodies()[0]["alert"]["message"].startswith("llama: 2 of 99 requests in 10 min had a TTFT over its")
    RequestLog.objects.update(created_at=timezone.now() - timedelta(minutes=11))  # out of the window
    assert [d.event for d in sent(now + 3)] == ["resolved"]


def test_an_error_rate_at_its_threshold_fires_and_resolves(webhook: Webhook) -> None:
    Destination.objects.update_or_create(pk=1, defaults={"webhook_url": webhook.url})
    only("error_rate")
    requests_of("llama", 20, status=503, created_at=timezone.now() - timedelta(minutes=2))  # a deleted one's
    serving("llama")  # the same served name, made since
    Deployment.objects.filter(name="llama").update(desired="serving")
    requests_of("llama", 18)
    requests_of("llama", 1, truncated=True, client_cancelled=True)  # a client that left: no failure of the service
    requests_of("llama", 30, status=429)  # refusals: the client's to fix, out of the share (1 of 50 would not fire)
    now = time.time()
    assert sent(now) == []
    requests_of("llama", 1, truncated=True)  # an engine that died mid-stream, as the panels count it
    assert [d.event for d in sent(now + 1)] == ["fired"]  # 1 of 20: 5 %
    said = webhook.bodies()[0]["alert"]["message"]
    assert "1 of 20 requests in 10 min failed, answered 5xx or cut short (5.0%, at or over 5.0%; 30 refused" in said
    requests_of("llama", 20)
    assert [d.event for d in sent(now + 2)] == ["resolved"]  # 1 of 40
    requests_of("llama", 2, status=502)
    assert [d.event for d in sent(now + 3)] == ["fired"]  # 3 of 42: a 5xx counts as ever


def test_an_alerts_subject_links_to_its_page_where_there_is_one(
    admin: Client, admin_user: object, client: Client, member: object
) -> None:
    found = rules()
    serving("llama")
    dep = Deployment.objects.get(name="llama")
    replica = Replica.objects.create(deployment=dep, runtime="process", host="h", port=1)
    key, _ = create_key("ci", admin_user)
    now = timezone.now()
    for kind, subject in (
        ("error_rate", "deployment llama"),
        ("replica_not_ready", f"replica {replica.runtime_name}"),
        ("budget", f"key {key.pk} today at the rule's threshold"),
        ("monitoring_stale", "celery beat"),
        ("deployment_failed", "deployment gone"),
    ):
        Alert.objects.create(rule=found[kind], subject=subject, message="m", since=now, fired_at=now)
    page = admin.get("/alerts/").content.decode()
    links = re.findall(r'<a href="([^"]+)">([^<]+)</a></td>', page)
    detail = f"/deployments/{dep.pk}/"
    assert (detail, "deployment llama") in links and (detail, f"replica {replica.runtime_name}") in links
    assert (f"/keys/{key.pk}/", f"key {key.prefix} (ci) today at 80 %") in links
    assert "<td>celery beat</td>" in page and "<td>deployment gone</td>" in page  # nothing to link to
    client.force_login(member)  # type: ignore[arg-type]
    seen = client.get("/alerts/").content.decode()
    assert f'href="/keys/{key.pk}/"' not in seen and f'href="{detail}"' in seen  # a member opens no one's key
