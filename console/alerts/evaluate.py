"""One evaluation of every rule (beat runs it, tasks.evaluate_alerts): each condition that holds opens an alert
for its subject (or keeps the open one), which fires once it has held the rule's ``for_minutes`` and repeats
every ``repeat_minutes`` while it holds; an open alert whose condition no longer holds is resolved with a
message (or dropped, if it never fired). Each piece of news is a Delivery per channel set up, sent by
tasks.deliver. A rule turned off resolves its open alerts.

Each rule is evaluated under a lock on its row, so two evaluations at once (two beats) never send the same news
twice; news is sent at most once per repeat interval, whatever the evaluation period."""

import logging
import time
from datetime import UTC, datetime, timedelta

import redis
from django.db import DatabaseError, transaction

from console.alerts import delivery
from console.alerts.conditions import CHECKS, WINDOWED
from console.alerts.models import Alert, AlertRule, Destination, Event
from console.alerts.rules import rules

log = logging.getLogger(__name__)


def evaluate(now: float | None = None) -> list[int]:
    """Evaluate every rule at ``now`` (epoch seconds; default the present); the ids of the deliveries made, for
    the caller to send once committed. A check that cannot read what it needs (Redis, a query) is logged and
    leaves that rule's alerts as they are."""
    now = time.time() if now is None else now
    destination = Destination.current()
    made: list[int] = []
    for kind, rule in rules().items():
        try:
            with transaction.atomic():
                locked = AlertRule.objects.select_for_update().get(pk=rule.pk)
                holding = CHECKS[kind](locked, now) if locked.enabled else {}
                made += _apply(locked, holding, now, destination)
        except (redis.RedisError, DatabaseError, OSError) as exc:
            log.warning("alert rule %s not evaluated: %s", kind, exc)
    return made


def _apply(rule: AlertRule, holding: dict[str, str], now: float, destination: Destination) -> list[int]:
    at = datetime.fromtimestamp(now, UTC)
    wait = timedelta(minutes=0.0 if rule.kind in WINDOWED else rule.for_minutes)
    repeat = timedelta(minutes=rule.repeat_minutes)
    open_alerts = {a.subject: a for a in Alert.objects.filter(rule=rule, resolved_at=None)}
    news: list[tuple[Alert, str]] = []
    for subject, message in holding.items():
        alert = open_alerts.pop(subject, None) or Alert(rule=rule, subject=subject, since=at)
        alert.message = message
        if alert.fired_at is None and at - alert.since >= wait:
            alert.fired_at = alert.last_sent_at = at
            news.append((alert, Event.FIRED))
        elif alert.last_sent_at and at - alert.last_sent_at >= repeat:
            alert.last_sent_at = at
            news.append((alert, Event.REPEATED))
        alert.save()
    for alert in open_alerts.values():
        if alert.fired_at is None:
            alert.delete()
            continue
        alert.resolved_at = at
        why = "the rule was turned off" if not rule.enabled else "the condition ended"
        alert.resolved_message = f"Resolved ({why}); last seen while it held: {alert.message}"
        alert.save(update_fields=["resolved_at", "resolved_message"])
        news.append((alert, Event.RESOLVED))
    return [d.pk for alert, event in news for d in delivery.planned(alert.pk, event, destination)]
