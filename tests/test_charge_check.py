"""Beat's accounting check (console.observability.charge_check) against the real Redis and database: a spending
counter that differs from the request log is mended to it and the audit log says so; a key with a request in
flight waits; a request admitted before the day began is not the day's; after a restore the counters of its day
and month are raised to the restored log, never lowered to it; a tokens-per-day counter below the log is raised to
it. Each test has a Hearth instance of its own, so no other process's counters are read."""

import json
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from console.access.keys import create_key
from console.access.models import ApiKey
from console.audit.models import AuditEntry
from console.observability import charge_check, restored
from console.observability.request_rows import write_rows
from console.observability.request_spool import notes_key, processes_key
from console.observability.spent import key_counters, periods, usd_counters

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_redis() -> Iterator[redis.Redis]:
    with override_settings(HEARTH_INSTANCE=f"check-test-{secrets.token_hex(4)}"):
        yield redis.Redis.from_url(settings.REDIS_URL)


def charged(key_id: int, nano: int, ended: float, seconds: float = 1.0) -> dict[str, Any]:
    """A row of a request of ``key_id`` that ended at ``ended`` (Unix s) after ``seconds``, charged ``nano``."""
    row = {"request_id": secrets.token_hex(16), "created_at": ended, "api_key_id": key_id, "model": "m"}
    return (
        row
        | {"surface": "openai", "endpoint": "/v1/chat/completions", "status": 200, "cost_usd": nano}
        | {"duration_seconds": seconds}
    )


def steady_now() -> float:
    """Now, or 15 minutes on when now is in the first 15 minutes of a UTC day: the rows a test writes a few minutes
    before ``now`` are then in its day and month (a full run at 00:01 UTC wrote them in the day before, and the
    checks rightly found the new day's counters held nothing of them)."""
    now = time.time()
    return now + 900 if now % 86_400 < 900 else now


def test_a_counter_that_differs_from_the_request_log_is_mended_to_it_and_audited(
    own_redis: redis.Redis, admin_user: Any
) -> None:
    r, now = own_redis, steady_now()
    mine, _ = create_key("mine", admin_user)
    other, _ = create_key("other", admin_user)
    write_rows([charged(mine.pk, 3000, now - 100), charged(mine.pk, 4000, now - 90), charged(other.pk, 500, now - 80)])
    key_day, key_month, owner_day, owner_month = usd_counters(mine.pk, admin_user.pk, now)
    r.set(key_day, 9000)  # a settlement Redis did not take left the reservation
    r.set(usd_counters(other.pk, admin_user.pk, now)[0], 500)  # right
    # the month's counters and the owner's were lost (a Redis restarted without persistence)
    mended = {m.counter: (m.held, m.rows) for m in charge_check.check(now)}
    assert mended[key_day] == (9000, 7000) and mended[key_month] == (0, 7000)
    assert mended[owner_day] == (0, 7500) and mended[owner_month] == (0, 7500)
    assert usd_counters(other.pk, admin_user.pk, now)[0] not in mended
    assert [int(r.get(c) or 0) for c in (key_day, key_month, owner_day, owner_month)] == [7000, 7000, 7500, 7500]
    assert 0 < r.ttl(owner_day) <= 2 * 86400
    audited = AuditEntry.objects.filter(action="accounting.mended")
    assert {e.target_name for e in audited} == set(mended)
    assert charge_check.check(now) == []  # mended once


def test_a_key_with_a_request_in_flight_or_just_ended_waits(own_redis: redis.Redis, admin_user: Any) -> None:
    r, now = own_redis, steady_now()
    running, _ = create_key("running", admin_user)
    recent, _ = create_key("recent", None)
    write_rows([charged(running.pk, 3000, now - 100), charged(recent.pk, 3000, now - 5)])
    r.sadd(processes_key(), "somewhere/ns/1/2")
    r.hset(notes_key("somewhere/ns/1/2"), "abc", json.dumps({"key_id": running.pk}))
    mended = charge_check.check(now)
    owner_day = usd_counters(running.pk, admin_user.pk, now)[2]
    assert mended == [] and r.get(owner_day) is None  # its owner waits with it
    r.delete(notes_key("somewhere/ns/1/2"))
    later = {m.counter for m in charge_check.check(now + charge_check.QUIET)}
    assert usd_counters(running.pk, admin_user.pk, now)[0] in later and owner_day in later
    assert usd_counters(recent.pk, None, now)[0] in later


def test_a_request_admitted_before_the_day_began_is_not_the_days_and_one_at_midnight_waits(
    own_redis: redis.Redis,
) -> None:
    r, now = own_redis, steady_now()
    day_start = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    if now - day_start < 200:
        pytest.skip("too close to midnight UTC for a request of the day to have ended 100 s ago")
    key, _ = create_key("k", None)
    write_rows([charged(key.pk, 3000, now - 100), charged(key.pk, 4000, day_start + 30, seconds=60)])
    day, month = usd_counters(key.pk, None, now)[:2]
    r.set(day, 3000)  # the long request was admitted yesterday: yesterday's counter holds it
    r.set(month, 7000)
    assert charge_check.check(now) == []
    edgy, _ = create_key("edgy", None)  # a request admitted 2 s before midnight, counted in either day
    write_rows([charged(edgy.pk, 5000, day_start + 3, seconds=5)])
    assert usd_counters(edgy.pk, None, now)[0] not in {m.counter for m in charge_check.check(now + 60)}


def test_a_restore_keeps_the_spend_of_its_day_and_month_in_the_counters_and_a_later_day_is_mended_as_before(
    own_redis: redis.Redis, admin_user: Any
) -> None:
    """A trial restored an older backup in place: the check lowered a key's day counter from $4.2195 to the $0.2737
    its restored rows held, and the key had its spend since the backup to spend again."""
    r, now = own_redis, steady_now()
    key, _ = create_key("team-a", admin_user)
    write_rows([charged(key.pk, 2737, now - 100)])  # the archive's rows: what was spent before the backup
    key_day, key_month, owner_day, owner_month = usd_counters(key.pk, admin_user.pk, now)
    r.set(key_day, 42195)  # what was spent until the restore, the backup's rows and those gone with it
    r.set(key_month, 42195)  # the owner's counters were lost (a new Redis): the restored rows are raised to
    restored.mark(now - 60)
    mended = {m.counter: (m.held, m.rows) for m in charge_check.check(now)}
    assert mended == {owner_day: (0, 2737), owner_month: (0, 2737)}
    assert [int(r.get(c) or 0) for c in (key_day, key_month)] == [42195, 42195]
    tomorrow = now + 86_400  # a day begun after the restore: a reservation left unsettled is lowered as before
    write_rows([charged(key.pk, 3000, tomorrow - 100)])
    next_day = usd_counters(key.pk, admin_user.pk, tomorrow)[0]
    r.set(next_day, 9000)
    assert (next_day, 9000, 3000) in {(m.counter, m.held, m.rows) for m in charge_check.check(tomorrow)}
    assert int(r.get(key_month) or 0) >= 42195  # this month, begun before the restore, never lowered


def tokens(key_id: int, prompt: int | None, completion: int, ended: float, seconds: float = 1.0) -> dict[str, Any]:
    """A row of a request of ``key_id`` of ``prompt`` and ``completion`` tokens, without a price."""
    row = charged(key_id, 0, ended, seconds) | {"prompt_tokens": prompt, "completion_tokens": completion}
    return row | {"cost_usd": None}


def test_a_tokens_per_day_counter_below_the_request_log_is_raised_to_it_and_never_lowered(
    own_redis: redis.Redis, admin_user: Any
) -> None:
    """A trial flushed Redis: the next request was told 19,949 of 20,000 tokens were left though the log held 1,353
    for the day, and the key went on past its limit."""
    r, now = own_redis, steady_now()
    day_start = now - now % 86_400
    if now - day_start < 200:
        pytest.skip("too close to midnight UTC for a request of the day to have ended 100 s ago")
    key, _ = create_key("limited", admin_user)
    ApiKey.objects.filter(pk=key.pk).update(tokens_per_day=20_000)
    unlimited, _ = create_key("unlimited", admin_user)
    rows = [tokens(key.pk, 1000, 253, now - 100), tokens(key.pk, None, 100, now - 90)]  # the second cut: no prompt
    rows += [tokens(key.pk, 5000, 5000, day_start + 30, seconds=60), tokens(unlimited.pk, 700, 7, now - 80)]
    write_rows(rows)  # the third was admitted yesterday
    counter = f"{key_counters(key.pk)}:tpd:{periods(now)[0]}"
    mended = [m for m in charge_check.check(now) if ":tpd:" in m.counter]
    assert mended == [charge_check.Mended(counter, 0, 1353, "tokens")]
    assert int(r.get(counter) or 0) == 1353 and 0 < r.ttl(counter) <= 2 * 86400
    audited = AuditEntry.objects.get(action="accounting.mended", target_name=counter)
    assert audited.changes == {"counter_tokens": 0, "request_log_tokens": 1353}
    r.set(counter, 1800)  # what requests in flight or unsettled reservations hold: left as it is
    assert [m for m in charge_check.check(now) if ":tpd:" in m.counter] == []
    assert int(r.get(counter) or 0) == 1800
