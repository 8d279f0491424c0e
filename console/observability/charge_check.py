"""Beat's accounting check: what Redis's counters say each key and member spent today and this month against
the request log's costs, and the counters mended where they differ.

A counter holds the cost of every request admitted in its period (UTC), each settled at its end, plus what the
requests still running hold (gateway.reservations); a row holds what its request was charged, and its request
was admitted ``duration_seconds`` before ``created_at``. So a counter must equal the sum of its rows' costs for
the requests admitted in its period, once none of its requests is running, waiting in the spool or ended less
than QUIET seconds ago (keys without limits are charged in batches, gateway.charges). Those are checked; the
others wait for a quiet moment. What can make them differ: a counter that Redis lost (a restart without
persistence: the rows put it back), a settlement or charge Redis did not take (an outage: the reservation or
the charge is mended), a request recorded by the check of a dead relay process at a price read then.

Each difference is logged, recorded in the audit log (``accounting.mended``) and mended: the counter is moved by
the difference. The check reads the counters first and the requests in flight last, so a request that ran at
any moment in between makes its key wait.

But for a day or month that began before the database was restored (console.observability.restored): its counters
hold what was spent since the backup, which its restored rows lack, so they are raised to the rows and never lowered.

A key's tokens-per-day counter (``…:tpd:<day>``, gateway.reservations: the tokens, prompt and output as the log counts
them, of the requests admitted that UTC day, plus what those running hold) is checked alike, for the live keys with
a tokens-per-day limit, but only raised to the rows: a Redis that lost it would let the key use its day again.
Per-minute windows are left as they are: a lost one is a minute's.
"""

import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import cast

import redis
from django.conf import settings
from django.db.models import Expression, F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from console.access.models import ApiKey
from console.audit.recording import record
from console.observability.models import RequestLog
from console.observability.request_rows import NANO
from console.observability.request_spool import Entry, notes_key, processes_key, spool_key, text
from console.observability.restored import restored_at
from console.observability.spent import DAY_TTL, MONTH_TTL, key_counters, owner_counters, periods

log = logging.getLogger(__name__)
QUIET = 30.0  # seconds since a key's last request ended before its counters are checked
SPOOL_LOOK = 1000  # spool entries looked through; more waiting (a database outage): no check this time
LONG = 60.0  # seconds: rows ending this long into a period, or lasting longer, may have been admitted before it
EDGE = 10.0  # seconds: a request that started this close to a period's start may be counted in either period


@dataclass(frozen=True)
class Mended:
    """One counter moved to what the request log says: its name, what it held and what the rows add up to, in
    ``unit``: ``nano_usd`` (a spending counter) or ``tokens`` (a tokens-per-day counter)."""

    counter: str
    held: int
    rows: int
    unit: str = "nano_usd"


def check(now: float | None = None) -> list[Mended]:
    """Compare and mend (module docstring); the counters mended. Raises RedisError and the driver's errors."""
    now = time.time() if now is None else now
    r = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=10)
    if r.xlen(spool_key()) > SPOOL_LOOK:
        return []
    day_start, month_start = _period_starts(now)
    owners = dict(ApiKey.objects.filter(_spent_since(month_start)).values_list("pk", "owner_id"))
    holders = {("key", k): [k] for k in owners}
    for key, owner in owners.items():
        if owner is not None:
            holders.setdefault(("owner", owner), []).append(key)
    day, month = periods(now)
    names = {(h, p): f"{_prefix(h)}:usd:{p}" for h in holders for p in (day, month)}
    limited = ApiKey.objects.filter(revoked_at__isnull=True, tokens_per_day__isnull=False).values_list("pk", flat=True)
    daily = {key: f"{key_counters(key)}:tpd:{day}" for key in limited}
    counters = [*names.values(), *daily.values()]
    held = dict(zip(counters, [int(v or 0) for v in r.mget(counters)] if counters else [], strict=True))
    spent = {day: _rows_by_key(list(owners), day_start), month: _rows_by_key(list(owners), month_start)}
    tokens, tokens_doubtful = _tokens_by_key(list(daily), day_start)
    restored = restored_at(r)
    busy = _busy_keys(r, now)
    mended = []
    for (holder, period), name in names.items():
        keys = holders[holder]
        by_key, doubtful = spent[period]
        rows = sum(by_key.get(k, 0) for k in keys)
        if any(k in busy or k in doubtful for k in keys) or rows == held[name]:
            continue
        if rows < held[name] and restored is not None and restored > (day_start if period == day else month_start):
            continue  # spent since the backup its restored rows were taken by (module docstring)
        mended.append(_mend(r, name, held[name], rows, DAY_TTL if period == day else MONTH_TTL))
    for key, name in daily.items():
        if key not in busy and key not in tokens_doubtful and tokens.get(key, 0) > held[name]:
            mended.append(_mend(r, name, held[name], tokens.get(key, 0), DAY_TTL, "tokens"))
    return mended


def _prefix(holder: tuple[str, int]) -> str:
    kind, ident = holder
    return key_counters(ident) if kind == "key" else owner_counters(ident)


def _period_starts(now: float) -> tuple[float, float]:
    """The Unix starts of the UTC day and month holding ``now``."""
    when = datetime.fromtimestamp(now, UTC)
    day = when.replace(hour=0, minute=0, second=0, microsecond=0)
    return day.timestamp(), day.replace(day=1).timestamp()


def _spent_since(start: float) -> Q:
    """Keys with a charged request that ended since ``start``, or whose counters may hold one (any live key)."""
    since = datetime.fromtimestamp(start, UTC)
    charged = RequestLog.objects.filter(created_at__gte=since, cost_usd__isnull=False).values("api_key_id")
    return Q(pk__in=charged) | Q(revoked_at__isnull=True)


def _rows_by_key(keys: list[int], start: float) -> tuple[dict[int, int], set[int]]:
    """Nano-USD charged per key for the requests admitted since ``start`` (Unix s), and the keys whose counters may
    hold a request in either period (``_admitted_since``)."""
    charged = RequestLog.objects.filter(api_key_id__in=keys, cost_usd__isnull=False)
    total, doubtful = _admitted_since(charged, start, F("cost_usd"))
    return {key: int(cost * NANO) for key, cost in total.items()}, doubtful


def _tokens_by_key(keys: list[int], start: float) -> tuple[dict[int, int], set[int]]:
    """Tokens (prompt + output, as the gateway settles them) per key of the requests admitted since ``start`` (Unix
    s), and the keys whose counters may hold a request in either period (``_admitted_since``)."""
    rows = RequestLog.objects.filter(api_key_id__in=keys)
    total, doubtful = _admitted_since(rows, start, Coalesce("prompt_tokens", 0) + Coalesce("completion_tokens", 0))
    return {key: int(tokens) for key, tokens in total.items()}, doubtful


def _admitted_since(
    rows: QuerySet[RequestLog], start: float, value: Expression | F
) -> tuple[dict[int, Decimal], set[int]]:
    """``value`` summed per key over ``rows`` of the requests admitted since ``start`` (module docstring: a row's
    request was admitted ``duration_seconds`` before it ended), and the keys with a request that started within EDGE
    seconds of ``start``, which its counters may hold in either period (they wait for the next check)."""
    since = datetime.fromtimestamp(start, UTC)
    rows = rows.filter(created_at__gte=since)
    total: dict[int, Decimal] = defaultdict(Decimal)
    for key, amount in rows.values("api_key_id").annotate(amount=Sum(value)).values_list("api_key_id", "amount"):
        total[key] += Decimal(amount)
    edge, doubtful = datetime.fromtimestamp(start + LONG, UTC), set()
    near = rows.filter(Q(created_at__lt=edge) | Q(duration_seconds__gt=LONG)).annotate(amount=value)
    for key, ended, duration, amount in near.values_list("api_key_id", "created_at", "duration_seconds", "amount"):
        began = ended.timestamp() - duration
        if abs(began - start) < EDGE:
            doubtful.add(key)
        if began < start:
            total[key] -= Decimal(amount)
    return total, doubtful


def _busy_keys(r: "redis.Redis", now: float) -> set[int]:
    """Keys with a request running (noted by a gateway process), waiting in the spool, or ended within QUIET."""
    busy: set[int] = set()
    for process in r.smembers(processes_key()):
        for note in r.hvals(notes_key(text(process))):
            busy.add(json.loads(note).get("key_id"))
    for _, fields in cast(list[Entry], r.xrange(spool_key(), count=SPOOL_LOOK)):
        busy.add(json.loads(fields[b"row"]).get("api_key_id"))
    recent = datetime.fromtimestamp(now - QUIET, UTC)
    busy.update(RequestLog.objects.filter(created_at__gte=recent).values_list("api_key_id", flat=True))
    return busy


def _mend(r: "redis.Redis", counter: str, held: int, rows: int, ttl: int, unit: str = "nano_usd") -> Mended:
    log.warning("accounting: %s held %d %s, the request log %d; mended", counter, held, unit, rows)
    with r.pipeline(transaction=True) as pipe:
        pipe.incrby(counter, rows - held)
        pipe.expire(counter, ttl, nx=True)
        pipe.execute()
    mended = Mended(counter, held, rows, unit)
    record(None, "accounting.mended", counter, {f"counter_{unit}": held, f"request_log_{unit}": rows})
    return mended
