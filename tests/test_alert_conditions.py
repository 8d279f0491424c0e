"""What an alert rule may be tuned to, who tuned it, and conditions that must not fire on what is not wrong (a
fresh user's trial: a stale-monitoring alert after every wake, a crashed replica's exit read "None", a KV-cache
rule at 5 with 1e308 minutes saved). The conditions against live engines: tests/test_alerts_live.py."""

import json
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import Client

from appliance import celery_heartbeats
from appliance.redis_keys import redis_key
from console.access import key_activity
from console.access.keys import create_key
from console.alerts import conditions
from console.alerts.models import Alert, AlertRule, Destination
from console.alerts.rules import rules
from console.audit.models import AuditEntry
from console.deployments.models import Deployment, DesiredState, Replica
from console.deployments.watching import STABLE_AFTER
from console.observability.models import RequestLog, ScrapeHealth
from console.observability.queue_depth import depth_key
from console.observability.spent import key_counters, periods
from tests.test_panels import deployment

pytestmark = pytest.mark.django_db


def at(seconds_ago: float) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds_ago)


def test_monitoring_is_not_stale_after_a_wake_until_a_scrape_is_late_from_it(monkeypatch: pytest.MonkeyPatch) -> None:
    celery_heartbeats.note_beat(5.0)  # as beat does for each task it sends
    monkeypatch.setattr(celery_heartbeats.Liveness, "worker_stopped", lambda self: "")  # an upkeep worker runs
    monkeypatch.setattr(celery_heartbeats.Liveness, "long_worker_stopped", lambda self: "")  # and a long-task one
    dep = deployment("nap")
    replica = dep.replicas.get()
    Replica.objects.filter(pk=replica.pk).update(ready_at=at(3600))
    ScrapeHealth.objects.create(replica=replica, last_success_at=at(600))  # its last scrape before it slept
    rule = rules()["monitoring_stale"]
    Deployment.objects.filter(pk=dep.pk).update(state_since=at(2))  # woke 2 s ago
    assert conditions.monitoring_stale(rule, time.time()) == {}
    Deployment.objects.filter(pk=dep.pk).update(state_since=at(600))  # awake 10 minutes, and not scraped since
    [message] = conditions.monitoring_stale(rule, time.time()).values()
    assert message.startswith(f"No good scrape of replica {replica.runtime_name}'s /metrics (nap) for 600 s")
    started = redis_key("upkeep-started")  # as an upkeep worker notes its start (celery_heartbeats)
    r = redis.Redis.from_url(settings.REDIS_URL)
    r.set(started, repr(time.time() - 2))
    try:  # a restart of the worker that scrapes: its silence is no stale scrape (a trial's alert at each make up)
        assert conditions.monitoring_stale(rule, time.time()) == {}
    finally:
        r.delete(started)


def test_a_stopped_long_task_worker_is_told_and_the_scrapes_are_still_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trial's killed long-task worker got the console's banner and no alert: launches waited in silence."""
    celery_heartbeats.note_beat(5.0)
    monkeypatch.setattr(celery_heartbeats.Liveness, "worker_stopped", lambda self: "")
    said = "no long-task worker has answered for 47 s"
    monkeypatch.setattr(celery_heartbeats.Liveness, "long_worker_stopped", lambda self: said)
    dep = deployment("late")
    Deployment.objects.filter(pk=dep.pk).update(state_since=at(600))
    replica = dep.replicas.get()
    Replica.objects.filter(pk=replica.pk).update(ready_at=at(3600))
    ScrapeHealth.objects.create(replica=replica, last_success_at=at(600))
    held = conditions.monitoring_stale(rules()["monitoring_stale"], time.time())
    assert held["celery worker-long"] == (
        f"The long-task worker is not running ({said}): launches, batches and capacity checks wait"
    )
    assert f"scrapes of {replica.runtime_name}" in held  # the upkeep worker scrapes on: a late scrape is still told
    r = redis.Redis.from_url(settings.REDIS_URL)
    r.set(redis_key("upkeep-started"), repr(time.time() - 2))
    try:  # make up starts both workers together: the long one is not told of while it may still be starting
        assert "celery worker-long" not in conditions.monitoring_stale(rules()["monitoring_stale"], time.time())
    finally:
        r.delete(redis_key("upkeep-started"))


def test_a_crashed_replica_waiting_to_restart_or_loading_again_says_how_its_engine_ended() -> None:
    dep = deployment("crashy")
    Deployment.objects.filter(pk=dep.pk).update(desired=DesiredState.SERVING)
    replica = dep.replicas.get()
    Replica.objects.filter(pk=replica.pk).update(
        running=False, ready_at=None, exit_code=None, previous_exit_code=-9, restart_at=at(-10)
    )
    [message] = conditions.replica_not_ready(rules()["replica_not_ready"], time.time()).values()
    assert "not running (exit -9, restart due" in message
    Replica.objects.filter(pk=replica.pk).update(previous_exit_code=None)
    [message] = conditions.replica_not_ready(rules()["replica_not_ready"], time.time()).values()
    assert "not running (exit code not known, restart due" in message
    relaunched = {"running": True, "restarts": 1, "previous_exit_code": -9, "started_at": at(125)}
    Replica.objects.filter(pk=replica.pk).update(**relaunched)
    [message] = conditions.replica_not_ready(rules()["replica_not_ready"], time.time()).values()
    assert message.endswith("is not ready: loading again for 2 min after its engine ended (exit -9)")
    Replica.objects.filter(pk=replica.pk).update(restarts=0)  # a first launch: a repeat says how long it loads
    [message] = conditions.replica_not_ready(rules()["replica_not_ready"], time.time()).values()
    assert message.endswith("is not ready: loading for 2 min")


def test_a_crash_loop_ends_once_its_replica_has_served_as_long_as_its_crash_count_is_kept() -> None:
    """A trial's alert said 'crash-looping (4 restarts in a row)' an hour after the engine came back and served
    1,800 requests: the count is only reset at a next crash (console.deployments.watching.STABLE_AFTER)."""
    dep = deployment("crashy")
    replica = dep.replicas.get()
    rule = rules()["deployment_failed"]  # threshold: 3 restarts in a row
    Replica.objects.filter(pk=replica.pk).update(running=True, restarts=3, previous_exit_code=-9, ready_at=at(60))
    [message] = conditions.deployment_failed(rule, time.time()).values()
    assert message == f"crashy: replica {replica.runtime_name} is crash-looping (3 restarts in a row, last exit -9)"
    Replica.objects.filter(pk=replica.pk).update(ready_at=at(STABLE_AFTER + 1))
    assert conditions.deployment_failed(rule, time.time()) == {}
    Replica.objects.filter(pk=replica.pk).update(running=False)  # crashed again: the news again until it serves
    assert list(conditions.deployment_failed(rule, time.time())) == ["deployment crashy"]


def test_requests_held_in_the_gateways_lanes_are_requests_waiting() -> None:
    """A deployment at its capacity holds standard and batch requests in the gateway (gateway.lanes), its engine's
    own queue empty: the alert counts those held too."""
    dep = deployment("busy")
    rule = rules()["requests_waiting"]
    r = redis.Redis.from_url(settings.REDIS_URL)
    r.hset(depth_key(dep.pk), "gw:1", json.dumps({"standard": 10, "batch": 5, "at": time.time()}))
    try:
        assert conditions.requests_waiting(rule, time.time()) == {}  # 15, under the default 16
        r.hset(depth_key(dep.pk), "gw:2", json.dumps({"standard": 1, "batch": 0, "at": time.time()}))
        assert conditions.requests_waiting(rule, time.time()) == {
            "requests_held of busy": "busy: 16 requests waiting in the gateway's priority lanes (11 standard, 5 batch) "
            "while it runs all it can, at or over 16"
        }
    finally:
        r.delete(depth_key(dep.pk))


def test_a_key_refused_for_its_budget_is_at_100_percent_though_its_spending_is_not(admin_user: Any) -> None:
    """A request is refused when what it may cost is more than what is left: a trial's key stalled at 93 % with every
    request refused, and the 100 % alert never came. Another refusal (a rate limit) is not the budget's."""
    key, _ = create_key("ci", admin_user, daily_budget_usd=Decimal("1.00"))
    now = time.time()
    day, _ = periods(now)
    redis.Redis.from_url(settings.REDIS_URL).set(f"{key_counters(key.pk)}:usd:{day}", 930_000_000)  # $0.93
    rule = rules()["budget"]

    def refused(error: str) -> None:
        RequestLog.objects.create(
            api_key=key, model="m", surface="openai", endpoint="/v1/chat/completions", status=429,
            duration_seconds=0, error=error,
        )  # fmt: skip

    assert list(conditions.budget(rule, now)) == [f"key {key.pk} today at {conditions.THRESHOLD}"]
    refused("This key's limit of 20 requests per minute is reached; it renews in 3 s.")
    assert list(conditions.budget(rule, now)) == [f"key {key.pk} today at {conditions.THRESHOLD}"]
    refused(
        "This key's daily budget of $1.00 has $0.07 left, less than this request may cost (up to $0.08: its prompt "
        "with one output token may cost $0.08); send a shorter prompt to pass now; it renews in 60 s."
    )
    held = conditions.budget(rule, now)
    assert held[f"key {key.pk} today at 100 %"] == (
        f"key {key.prefix} (ci) is refused for its budget today: $0.9300 of its $1.00 spent (93 %), and a request "
        "that may cost more than the $0.0700 left is refused, even with one output token"
    )
    later = now + key_activity.REFUSED_WITHIN + 1  # no refusal since (a budget raised, a client that stopped asking)
    if periods(later)[0] == day:
        assert list(conditions.budget(rule, later)) == [f"key {key.pk} today at {conditions.THRESHOLD}"]


def test_a_rule_is_refused_past_what_its_threshold_and_minutes_can_mean_and_each_change_is_audited(
    admin: Client,
) -> None:
    def tune(**fields: str) -> str:
        form = {f"kv_cache_high-{k}": v for k, v in fields.items()}
        return admin.post("/alerts/rules/kv_cache_high/", form, follow=True).content.decode()

    page = tune(enabled="on", threshold="5", for_minutes="1e308", repeat_minutes="1e9")
    assert "not saved" in page
    assert "Threshold: At most 1; its unit: ratio 0–1." in page
    assert 'name="kv_cache_high-threshold" value="5"' in page and 'value="1e308"' in page  # kept as typed
    assert "Holds for (min): At most 1,440 minutes (a day)." in page
    assert "Repeats every (min): At most 10,080 minutes (a week)." in page
    assert ".;" not in page
    assert not AuditEntry.objects.filter(action="alerts.rule").exists()
    tune(enabled="on", threshold="0.95", for_minutes="10", repeat_minutes="60")
    rule = AlertRule.objects.get(kind="kv_cache_high")
    assert (rule.threshold, rule.for_minutes, rule.repeat_minutes) == (0.95, 10, 60)
    [entry] = AuditEntry.objects.filter(action="alerts.rule")
    assert entry.changes == {"threshold": [0.9, 0.95], "for_minutes": [5.0, 10.0]} and entry.actor_name == "admin"
    page = tune(enabled="on", threshold="0.95", for_minutes="10", repeat_minutes="60")  # saved again as it is
    assert "“KV cache nearly full”: no change." in page
    assert AuditEntry.objects.filter(action="alerts.rule").count() == 1  # no entry of nothing changed


def test_a_destination_change_is_audited_without_the_webhooks_secret(admin: Client) -> None:
    url = "https://hooks.slack.com/services/T000/B000/XXXXsecretXXXX"
    admin.post("/alerts/destination/", {"webhook_url": url, "email_to": "ops@example.com"})
    [entry] = AuditEntry.objects.filter(action="alerts.destination")
    assert entry.changes == {
        "webhook_url": ["none", "https://hooks.slack.com/…"],
        "email_to": ["", "ops@example.com"],
    }
    assert "secret" not in str(entry.changes)
    page = admin.post("/alerts/destination/", {"email_to": "ops@"}, follow=True).content.decode()
    assert "Not saved: ops@ is not an email address." in page and 'name="email_to" value="ops@"' in page
    page = admin.post("/alerts/destination/", {"email_to": "ops@, bob, a@b.co"}).content.decode()
    assert "Not saved: ops@, bob are not email addresses." in page and 'value="ops@, bob, a@b.co"' in page
    page = admin.post("/alerts/destination/", {"webhook_url": "http://127.0.0.1:99999/x"}, follow=True).content
    assert "Not saved: A webhook URL&#x27;s port is 1 to 65535." in page.decode()
    page = admin.post("/alerts/destination/", {"webhook_url": "ftp://example.com/x"}).content.decode()
    under = '<ul class="errorlist" id="id_webhook_url_error"><li>A webhook URL is http or https, not ftp.</li></ul>'
    assert under in page and Destination.current().webhook_url == url  # refused under its field; the one set stays
    page = admin.post("/alerts/destination/", {"email_to": "not-an-email"}).content.decode()
    assert '<ul class="errorlist" id="id_email_to_error"><li>not-an-email is not an email address.</li>' in page


def test_the_alerts_page_names_firing_and_resolved_alerts_by_their_titles(admin: Client) -> None:
    found = rules()
    Alert.objects.create(rule=found["replica_not_ready"], subject="replica r-1", message="m", fired_at=at(60))
    Alert.objects.create(
        rule=found["kv_cache_high"],
        subject="kv",
        message="m",
        fired_at=at(600),
        resolved_at=at(5),
        resolved_message="r",
    )
    page = admin.get("/alerts/").content.decode()
    assert "<td>Replica not ready</td><td>replica r-1</td>" in page
    assert "<td>KV cache nearly full</td><td>kv</td>" in page
    assert "<td>kv_cache_high</td>" not in page and "<td>replica_not_ready</td>" not in page
