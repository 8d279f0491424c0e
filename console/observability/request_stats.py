"""Requests as users see them, from the request log the gateway writes and, for the panels, the requests it relays
now (console.observability.in_flight): exact percentiles over a recent window for the panels, and per-scrape
counts (with sparse histograms) of finished requests stored in the history for the charts.

User-visible TTFT is the gateway's first generated token to the client, a reasoning model's thinking included
(gateway.relay_stream: as ``vllm bench serve``, the capacity check and the engine's histogram count it, so a
deployment's TTFT SLO reads the same on each); user-visible ITL is (duration − TTFT) / (completion tokens − 1), as
AIPerf and GenAI-Perf define it. Only served requests (outcomes.SERVED) feed latencies and goodput, with the
requests in flight whose first token went out (their TTFT is known from that byte, their ITL so far); refusals
(4xx) are counted apart from errors (outcomes.ERRORS). Percentiles interpolate linearly between the nearest ranks
(numpy's default, which AIPerf reports).
"""

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import redis
from django.conf import settings
from django.db import connection
from django.db.models import Max

from appliance.redis_keys import redis_key
from console.deployments.models import Deployment
from console.observability import request_stats_sql
from console.observability.in_flight import InFlight
from console.observability.models import MetricSample, RequestLog, ServiceLevel
from console.observability.outcomes import ERRORS, OUTCOMES, REFUSALS, SERVED, Slo, inter_token_seconds, outcome_of
from engines.metrics import Histogram

# Log-spaced bounds (×1.2 from 1 ms to past 30 minutes), seconds, for the gateway side's stored histograms: a
# percentile read from them lies within 20 % of the exact one (usually far closer).
USER_BOUNDS: tuple[float, ...] = tuple(round(0.001 * 1.2**k, 6) for k in range(80))
# Rows from which PostgreSQL's aggregates beat counting here in time (bench, 2026-12-01: 600 rows 46 ms in SQL against
# 13 ms here, 2,400 rows 53 against 28 ms, 27,000 rows 130 against 213). This process's CPU alone (what holds the
# relay's GIL) crosses over sooner, at ~2,000 rows (17 ms of Django building the 5 queries against ~8 µs a row
# here), but on a box of 2 cores PostgreSQL's own CPU competes with the relay just the same: the total decides.
SQL_FROM_ROWS = 4000
REDIS_TIMEOUT = 5.0  # seconds a read or write of the cursor may take: a Redis that hangs must not hold the scrape
FIELDS = (
    "id",
    "model",
    "api_key_id",
    "status",
    "finish_reason",
    "truncated",
    "client_cancelled",
    "completion_tokens",
    "prompt_tokens",
    "ttft_seconds",
    "duration_seconds",
    "woke_engine",
)


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0–1) of sorted values, linear between closest ranks (numpy's default); None if empty."""
    if not sorted_values:
        return None
    pos = q * (len(sorted_values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass
class RequestStats:
    """Requests of one deployment: those that ended in a window (counts by outcome, errors and refusals by status,
    tokens, tokens per API key id, how many met the SLO) and those running now (``running``; None: not known), and
    the latencies (seconds) of both: served requests' and running ones' that have them."""

    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    errors_by_status: dict[int, int] = field(default_factory=dict)
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_by_key: dict[int | None, int] = field(default_factory=dict)
    met_slo: int = 0
    known: dict[str, tuple[int, dict[str, float | None]]] = field(default_factory=dict)  # aggregated elsewhere
    running: int | None = 0  # requests in flight now (None: Redis did not say)
    running_ttft: int = 0  # of them, those whose first token went out (their TTFT is in ``ttft``)
    held_for_wake: int = 0  # served requests with a TTFT that were held for their engine's wake (it is in the TTFT)

    @property
    def total(self) -> int:
        """Requests that ended in the window."""
        return sum(self.outcomes.values())

    @property
    def errors(self) -> int:
        """Requests the service failed (engine errors, truncated streams)."""
        return sum(n for o, n in self.outcomes.items() if o in ERRORS)

    @property
    def refusals(self) -> int:
        """Requests refused with a 4xx (a key, a quota, a prompt too long): the client's to fix, no outage."""
        return sum(n for o, n in self.outcomes.items() if o in REFUSALS)

    @property
    def answered(self) -> int:
        """Requests that ended and were not refused: the ones the service could fail."""
        return self.total - self.refusals

    @property
    def error_rate(self) -> float | None:
        """Share (0–1) of the requests that ended, refusals left out, which the service failed; None when none
        but refusals ended (a crash among many 4xx read as a low rate while they counted)."""
        return self.errors / self.answered if self.answered else None

    @property
    def refusal_rate(self) -> float | None:
        """Share (0–1) of the requests that ended which were refused; None when none ended."""
        return self.refusals / self.total if self.total else None

    @property
    def goodput(self) -> float | None:
        """Share (0–1) of the window's requests that met the SLO."""
        return self.met_slo / self.total if self.total else None

    @property
    def ttft_q(self) -> dict[str, float | None]:
        return self.quantiles("ttft")

    @property
    def itl_q(self) -> dict[str, float | None]:
        return self.quantiles("itl")

    @property
    def ttft_count(self) -> int:
        """Served requests with a TTFT (those its percentiles are of)."""
        return self.known["ttft"][0] if "ttft" in self.known else len(self.ttft)

    @property
    def itl_count(self) -> int:
        return self.known["itl"][0] if "itl" in self.known else len(self.itl)

    def quantiles(self, which: str) -> dict[str, float | None]:
        """p50, p90 and p99 (seconds) of ``which`` ("ttft" or "itl"), worked out once."""
        if which not in self.known:
            values = sorted(self.ttft if which == "ttft" else self.itl)
            found = {f"p{round(q * 100)}": percentile(values, q) for q in request_stats_sql.QUANTILES}
            self.known[which] = (len(values), found)
        return self.known[which][1]

    def add(self, row: tuple, slo: Slo) -> None:  # type: ignore[type-arg]
        """Count one request log row (FIELDS' order)."""
        self.known.clear()  # percentiles worked out before this row are stale
        _, _, key, status, finish, truncated, cancelled, completion, prompt, ttft, duration, woke = row
        outcome = outcome_of(status, finish, truncated, cancelled, completion)
        self.outcomes[outcome] += 1
        if outcome in ERRORS or outcome in REFUSALS:
            self.errors_by_status[status] = self.errors_by_status.get(status, 0) + 1
        itl = inter_token_seconds(ttft, duration, completion)
        if outcome in SERVED:
            if ttft is not None:
                self.ttft.append(ttft)
                self.held_for_wake += bool(woke)
            if itl is not None:
                self.itl.append(itl)
        if slo.any and slo.met(outcome, ttft, itl):
            self.met_slo += 1
        tokens = (prompt or 0) + (completion or 0)
        self.prompt_tokens += prompt or 0
        self.completion_tokens += completion or 0
        self.tokens_by_key[key] = self.tokens_by_key.get(key, 0) + tokens

    def add_in_flight(self, flight: InFlight | None) -> None:
        """Count the requests running now (None: not known), their TTFTs and ITLs so far with the served ones'."""
        self.known.clear()
        if flight is None:
            self.running = None
            return
        self.running, self.running_ttft = flight.running, len(flight.ttft)
        self.ttft += flight.ttft
        self.itl += flight.itl


def slos(deployments: Iterable[Deployment]) -> dict[int, Slo]:
    """Each deployment's SLO targets, by id (none set: no entry)."""
    ids = [d.pk for d in deployments]
    rows = ServiceLevel.objects.filter(deployment_id__in=ids)
    return {s.deployment_id: Slo(s.ttft_seconds, s.itl_seconds) for s in rows}


def window_stats(
    deployments: Sequence[Deployment],
    since: datetime,
    in_database: bool | None = None,
    flights: dict[int, InFlight] | None = None,
) -> dict[int, RequestStats]:
    """Each deployment's requests that ended since ``since``, by deployment id (requests are matched to a
    deployment by the served model name clients asked for), with its requests in flight from ``flights``
    (console.observability.in_flight; None: not known, every ``running`` None). On PostgreSQL, past
    SQL_FROM_ROWS rows, the database aggregates them (request_stats_sql); otherwise, or with ``in_database``
    False, every row is counted here."""
    by_name = {d.served_model_name: d.pk for d in deployments}
    targets = slos(deployments)
    window = RequestLog.objects.filter(created_at__gte=since, model__in=list(by_name)).values_list(*FIELDS)
    rows = None  # one client-side fetch below: a server-side cursor (iterator()) cost 11 ms a refresh
    if in_database is None and connection.vendor == "postgresql":
        rows = list(window[: SQL_FROM_ROWS + 1])  # the rows themselves say whether there are more: no count first
        in_database = len(rows) > SQL_FROM_ROWS
    if in_database:
        named = {name: targets[pk] for name, pk in by_name.items() if pk in targets}
        found = request_stats_sql.window(list(by_name), since, named)
        out = {by_name[m]: _from_aggregates(a) for m, a in found.items()}
        for model, pk in by_name.items():
            _in_flight_in_database(out[pk], model, since, None if flights is None else flights.get(pk, InFlight()))
        return out
    out = {d.pk: RequestStats() for d in deployments}
    for row in window if rows is None else rows:
        pk = by_name[row[1]]
        out[pk].add(row, targets.get(pk, Slo()))
    for pk, stats in out.items():
        stats.add_in_flight(None if flights is None else flights.get(pk, InFlight()))
    return out


def _in_flight_in_database(stats: RequestStats, model: str, since: datetime, flight: InFlight | None) -> None:
    """``add_in_flight`` for statistics PostgreSQL aggregated: the percentiles are asked again with the running
    requests' values (one query for each of TTFT and ITL that has any)."""
    if flight is None:
        stats.running = None
        return
    stats.running, stats.running_ttft = flight.running, len(flight.ttft)
    for which, extra in (("ttft", flight.ttft), ("itl", flight.itl)):
        if extra:
            stats.known[which] = _found(*request_stats_sql.served_percentiles(model, since, which, extra))


def _from_aggregates(a: request_stats_sql.Aggregates) -> RequestStats:
    stats = RequestStats(
        errors_by_status=a.errors_by_status,
        prompt_tokens=a.prompt_tokens,
        completion_tokens=a.completion_tokens,
        tokens_by_key=a.tokens_by_key,
        met_slo=a.met_slo,
        held_for_wake=a.held_for_wake,
    )
    stats.outcomes.update(a.outcomes)
    stats.known["ttft"], stats.known["itl"] = _found(*a.ttft), _found(*a.itl)
    return stats


def _found(n: int, values: list[float] | None) -> tuple[int, dict[str, float | None]]:
    """PostgreSQL's count and QUANTILES as RequestStats.known holds them."""
    qs = request_stats_sql.QUANTILES
    got: list[float | None] = list(values) if values else [None] * len(qs)
    return n, {f"p{round(q * 100)}": v for q, v in zip(qs, got, strict=True)}


def _sparse(values: Iterable[float]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in values:
        idx = str(bisect.bisect_left(USER_BOUNDS, v))
        counts[idx] = counts.get(idx, 0) + 1
    return counts


def sparse_histogram(sparse: dict[str, int]) -> Histogram | None:
    """A stored sparse histogram (bucket index → count) as a cumulative Histogram over USER_BOUNDS."""
    if not sparse:
        return None
    per = [0.0] * (len(USER_BOUNDS) + 1)
    for idx, n in sparse.items():
        per[min(int(idx), len(USER_BOUNDS))] += n
    cumulative, acc = [], 0.0
    for share in per:
        acc += share
        cumulative.append(acc)
    return Histogram(USER_BOUNDS, tuple(cumulative))


def stored_counts(stats: RequestStats, last_id: int) -> dict[str, object]:
    """What the history keeps of a period's requests (MetricSample without a replica)."""
    return {
        "d": {
            **{o: n for o, n in stats.outcomes.items() if n},
            "requests": stats.total,
            "errors": stats.errors,
            "prompt_tokens": stats.prompt_tokens,
            "completion_tokens": stats.completion_tokens,
            "met_slo": stats.met_slo,
        },
        "e": {str(s): n for s, n in stats.errors_by_status.items()},
        "uh": {"ttft": _sparse(stats.ttft), "itl": _sparse(stats.itl)},
        "last_id": last_id,
    }


def cursor_key() -> str:
    """Redis key of the last request log id counted into the history (one function: the namespacing switch)."""
    return redis_key("observability:requestlog-cursor")


def record_requests(deployments: Sequence[Deployment], at: datetime, batch: int = 50_000) -> int:
    """Count the request log rows written since the last call into one history sample per deployment that had
    any; returns the rows counted. The position is kept in Redis; without it, counting starts at the rows
    of the last scrape interval."""
    r = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT)
    raw = r.get(cursor_key())
    if raw is None:
        since = datetime.fromtimestamp(at.timestamp() - settings.HEARTH_SCRAPE_INTERVAL, at.tzinfo)
        first_new = RequestLog.objects.filter(created_at__gte=since).order_by("id").values_list("id", flat=True).first()
        start = first_new - 1 if first_new is not None else RequestLog.objects.aggregate(m=Max("id"))["m"] or 0
    else:
        start = int(raw)
    rows = list(RequestLog.objects.filter(id__gt=start).order_by("id").values_list(*FIELDS)[:batch])
    if not rows:
        return 0
    by_name = {d.served_model_name: d for d in deployments}
    targets = slos(deployments)
    stats: dict[int, RequestStats] = {}
    for row in rows:
        dep = by_name.get(row[1])
        if dep is not None:
            stats.setdefault(dep.pk, RequestStats()).add(row, targets.get(dep.pk, Slo()))
    last = rows[-1][0]
    MetricSample.objects.bulk_create(
        [MetricSample(deployment_id=pk, replica=None, at=at, values=stored_counts(s, last)) for pk, s in stats.items()]
    )
    r.set(cursor_key(), last)
    return len(rows)
