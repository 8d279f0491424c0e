"""Budget alerts from a fresh user's trial: one request refused for asking too many output tokens called a key at 9 %
spent ("at 100 %", resolving and firing again at each such request); a threshold tuned from 80 to 50, or a key
rotated, resolved every alert and fired it again though nothing was spent. Alert 0002 renames the subjects of before
so an upgrade does not do the same."""

import time
from decimal import Decimal
from typing import Any

import pytest
import redis
from django.conf import settings

from console.access.key_activity import FEWER_OUTPUT_TOKENS
from console.access.keys import create_key, rotate_key
from console.access.models import ApiKey
from console.alerts.conditions import SPENT, budget
from console.alerts.evaluate import evaluate
from console.alerts.models import THRESHOLD, Alert, AlertRule, Delivery, Destination
from console.alerts.rules import rules
from console.observability.models import RequestLog
from console.observability.spent import key_counters, periods
from tests.migrating import migrate, schema_at

pytestmark = pytest.mark.django_db
BEFORE = [("alerts", "0001_initial")]
AFTER = [("alerts", "0002_budget_subjects_by_id")]


def spend(key: ApiKey, usd: str, now: float) -> None:
    """What the gateway's charges leave in the key's day counter (nano-USD, console.observability.spent)."""
    redis.Redis.from_url(settings.REDIS_URL).set(
        f"{key_counters(key.pk)}:usd:{periods(now)[0]}", int(Decimal(usd) * 10**9)
    )


def refused(key: ApiKey, error: str) -> None:
    """A 429 in the request log, as the gateway keeps a budget's refusal."""
    RequestLog.objects.create(
        api_key=key, model="m", surface="openai", endpoint="/v1/chat/completions", status=429, duration_seconds=0,
        error=error,
    )  # fmt: skip


def only_budget(**fields: float) -> AlertRule:
    """The budget rule, tuned by ``fields``, with every other rule off (their conditions may hold on a test box)."""
    rules()
    AlertRule.objects.exclude(kind="budget").update(enabled=False)
    AlertRule.objects.filter(kind="budget").update(**fields)
    Destination.objects.update_or_create(
        pk=1, defaults={"webhook_url": "http://127.0.0.1:9/hook", "email_to": "o@p.co"}
    )
    return AlertRule.objects.get(kind="budget")


def test_one_request_refused_for_asking_too_many_output_tokens_is_no_spent_budget(admin_user: Any) -> None:
    key, _ = create_key("g", admin_user, daily_budget_usd=Decimal("2.00"))
    now = time.time()
    spend(key, "0.179", now)
    refused(
        key,
        "This key's daily budget of $2.00 has $1.82 left, less than this request may cost (up to $2.00: its prompt "
        f"and output limit); {FEWER_OUTPUT_TOKENS}; it renews in 3,600 s (at 2026-12-05 00:00 UTC).",
    )
    assert budget(only_budget(), now) == {}  # 9 %: under 80 %, and a smaller request passes
    assert evaluate(now) == [] and not Alert.objects.exists()


@pytest.mark.parametrize(
    "state",
    [
        "is spent",
        "has $0.07 left, less than this request may cost (up to $0.08: its prompt with one output token may cost "
        "$0.08); send a shorter prompt to pass now",
    ],
)
def test_a_refusal_no_smaller_request_passes_is_the_budget_spent_below_100_percent(admin_user: Any, state: str) -> None:
    key, _ = create_key("g", admin_user, daily_budget_usd=Decimal("1.00"))
    now = time.time()
    spend(key, "0.93", now)
    refused(key, f"This key's daily budget of $1.00 {state}; it renews in 60 s.")
    held = budget(only_budget(), now)
    assert list(held) == [f"key {key.pk} today at {THRESHOLD}", f"key {key.pk} today at {SPENT}"]
    assert held[f"key {key.pk} today at {SPENT}"].startswith(f"key {key.prefix} (g) is refused for its budget today")


def test_a_long_prompts_refusal_below_the_threshold_is_no_spent_budget(admin_user: Any) -> None:
    """A trial's member at 28 % was called spent at 100 % for one 2,400-token prompt: a shorter one passed."""
    key, _ = create_key("g", admin_user, daily_budget_usd=Decimal("3.00"))
    now = time.time()
    spend(key, "0.84", now)
    long_prompt = "has $2.16 left, less than this request may cost (up to $2.40: its prompt with one output token"
    refused(key, f"This key's daily budget of $3.00 {long_prompt} may cost $2.40); send a shorter prompt to pass now")
    assert budget(only_budget(), now) == {}


def test_a_threshold_tuned_from_80_to_50_leaves_the_open_alert_open_and_sends_nothing(admin_user: Any) -> None:
    key, _ = create_key("g", admin_user, daily_budget_usd=Decimal("1.00"))
    only_budget(threshold=80, repeat_minutes=60)
    now = time.time()
    spend(key, "0.85", now)
    assert len(evaluate(now)) == 2  # fired, by webhook and email
    [alert] = Alert.objects.all()
    AlertRule.objects.filter(kind="budget").update(threshold=50)
    deliveries = Delivery.objects.count()
    assert evaluate(now + 60) == [] and Delivery.objects.count() == deliveries
    [still] = Alert.objects.all()
    assert (still.pk, still.resolved_at, still.fired_at) == (alert.pk, None, alert.fired_at)
    assert still.message.endswith("85 % of its $1.00 budget, at or over 50 %")
    assert still.about == f"key {key.prefix} (g) today at 50 %"  # as the page and an email's subject say it


def test_a_rotated_key_keeps_its_open_alerts_which_name_its_new_prefix(admin_user: Any) -> None:
    key, _ = create_key("g", admin_user, daily_budget_usd=Decimal("1.00"))
    only_budget(repeat_minutes=60)
    now = time.time()
    spend(key, "1.20", now)
    assert len(evaluate(now)) == 4  # both levels fired, by webhook and email
    before = {a.pk: a.fired_at for a in Alert.objects.all()}
    old = key.prefix
    rotate_key(key, admin_user, 600)
    deliveries = Delivery.objects.count()
    assert evaluate(now + 60) == [] and Delivery.objects.count() == deliveries
    alerts = Alert.objects.filter(resolved_at=None)
    assert {a.pk: a.fired_at for a in alerts} == before
    assert key.prefix != old and all(a.message.startswith(f"key {key.prefix} (g) spent $1.2000") for a in alerts)
    assert {a.about for a in alerts} == {f"key {key.prefix} (g) today at 80 %", f"key {key.prefix} (g) today at 100 %"}


@pytest.mark.django_db(transaction=True)
def test_alerts_0002_renames_the_budget_alerts_of_before_so_an_open_one_stays_open(admin_user: Any) -> None:
    key, _ = create_key("g", admin_user, daily_budget_usd=Decimal("1.00"))
    old = key.prefix
    rotate_key(key, admin_user, 600)  # its alerts of before the rotation name the prefix before
    rules()
    with schema_at(BEFORE) as before:
        rule = before.get_model("alerts", "AlertRule").objects.get(kind="budget")
        made = before.get_model("alerts", "Alert").objects
        for subject, resolved in (
            (f"key {key.prefix} (g) today at 80 %", None),
            (f"key {key.prefix} (g) today at 100 %", None),
            (f"key {old} (g) this month at 80 %", rule.updated_at),
            ("member mia this month at 50 %", None),
            ("key hk-gone (x) today at 80 %", None),  # a key no longer here: left as it was
        ):
            made.create(rule=rule, subject=subject, message="m", fired_at=rule.updated_at, resolved_at=resolved)
        after = migrate(AFTER).get_model("alerts", "Alert")
        assert {(a.subject, a.resolved_at is None) for a in after.objects.all()} == {
            ("key hk-gone (x) today at 80 %", True),
            (f"key {key.pk} this month at {THRESHOLD}", False),
            (f"key {key.pk} today at {SPENT}", True),
            (f"key {key.pk} today at {THRESHOLD}", True),
            (f"member mia this month at {THRESHOLD}", True),
        }
        back = migrate(BEFORE).get_model("alerts", "Alert")
        assert f"key {key.prefix} (g) today at 80 %" in back.objects.values_list("subject", flat=True)
