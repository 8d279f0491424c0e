"""A request-log window's statistics aggregated by PostgreSQL (request_stats.window_stats uses it there).

The same numbers request_stats.RequestStats.add counts row by row in Python, with exact percentiles from
``percentile_cont`` (linear between the closest ranks: numpy's default and request_stats.percentile), so that
a panel refresh moves a few rows per deployment instead of every request of the window into the web process
(64 streams make ~90 requests/s: ~27,000 rows in 5 minutes, ~300 ms of Python holding the GIL the relay needs).

``OUTCOME`` (one condition per outcome, ``OUTCOME_WHERE``) and ``ITL`` say in SQL what
console.observability.outcomes' ``outcome_of`` and ``inter_token_seconds`` say in Python;
tests/test_request_stats_sql.py holds the two paths to the same answers.

May import: console.observability's models and outcomes, Django.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.postgres.fields import ArrayField
from django.db import connection
from django.db.models import Aggregate, Case, CharField, Count, F, FloatField, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Coalesce, Greatest

from console.observability.models import RequestLog
from console.observability.outcomes import ERRORS, LENGTH_CUTS, REFUSALS, SERVED, Slo

QUANTILES = (0.5, 0.9, 0.99)

_ENDED = Q(client_cancelled=False, truncated=False)
_SERVED = _ENDED & Q(status__gt=0, status__lt=400)
_LENGTH = Q(finish_reason__in=LENGTH_CUTS)
# Each outcome's rows, one condition each, no row in two: the request log's filter and Usage's columns read them.
OUTCOME_WHERE = {
    "cancelled": Q(client_cancelled=True),
    "truncated": Q(client_cancelled=False, truncated=True),
    "refused": _ENDED & Q(status__gte=400, status__lt=500),
    "error": _ENDED & (Q(status__gte=500) | Q(status=0)),
    "length": _SERVED & _LENGTH,
    "empty": _SERVED & ~_LENGTH & Q(completion_tokens=0),
    "success": _SERVED & ~_LENGTH & ~Q(completion_tokens=0),
}
OUTCOME = Case(
    *(When(where, then=Value(outcome)) for outcome, where in OUTCOME_WHERE.items()),
    output_field=CharField(),
)
ITL = Case(
    When(
        ttft_seconds__isnull=False,
        completion_tokens__gte=2,
        then=Greatest(F("duration_seconds") - F("ttft_seconds"), Value(0.0)) / (F("completion_tokens") - 1),
    ),
    default=None,
    output_field=FloatField(),
)


class Percentiles(Aggregate):
    """``percentile_cont(QUANTILES) WITHIN GROUP (ORDER BY expr)``: a list of floats (None without values);
    NULLs are left out."""

    function = "percentile_cont"
    template = "%(function)s(ARRAY[" + ", ".join(str(q) for q in QUANTILES) + "]::float8[]) WITHIN GROUP "
    template += "(ORDER BY %(expressions)s)"
    output_field = ArrayField(FloatField())


@dataclass
class Aggregates:
    """One served model name's window: counts by outcome, errors by status, token sums, tokens per API key id,
    requests that met the SLO, and the served requests' TTFT and ITL (count and QUANTILES, seconds)."""

    outcomes: dict[str, int] = field(default_factory=dict)
    errors_by_status: dict[int, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_by_key: dict[int | None, int] = field(default_factory=dict)
    met_slo: int = 0
    ttft: tuple[int, list[float] | None] = (0, None)
    itl: tuple[int, list[float] | None] = (0, None)
    held_for_wake: int = 0  # served requests with a TTFT held for their engine's wake


def window(models: Sequence[str], since: datetime, slos: dict[str, Slo]) -> dict[str, Aggregates]:
    """The requests that ended since ``since`` for each served model name (all present, empty when none), in
    4 queries plus one per model with an SLO."""
    rows: QuerySet[RequestLog] = RequestLog.objects.filter(created_at__gte=since, model__in=list(models))
    rows = rows.annotate(outcome=OUTCOME, itl=ITL)
    out = {m: Aggregates() for m in models}
    by_outcome = rows.values("model", "outcome").annotate(
        n=Count("id"), p=Sum("prompt_tokens"), c=Sum("completion_tokens")
    )
    for r in by_outcome:
        agg = out[r["model"]]
        agg.outcomes[r["outcome"]] = r["n"]
        agg.prompt_tokens += r["p"] or 0
        agg.completion_tokens += r["c"] or 0
    for e in rows.filter(outcome__in=ERRORS | REFUSALS).values("model", "status").annotate(n=Count("id")):
        out[e["model"]].errors_by_status[e["status"]] = e["n"]
    tokens = Sum(Coalesce("prompt_tokens", 0) + Coalesce("completion_tokens", 0))
    for k in rows.values("model", "api_key_id").annotate(t=tokens):
        out[k["model"]].tokens_by_key[k["api_key_id"]] = k["t"]
    served = rows.filter(outcome__in=SERVED).values("model")
    latency = served.annotate(
        tn=Count("ttft_seconds"),
        tq=Percentiles("ttft_seconds"),
        inn=Count("itl"),
        iq=Percentiles("itl"),
        held=Count("id", filter=Q(woke_engine=True, ttft_seconds__isnull=False)),
    )
    for lat in latency:
        out[lat["model"]].held_for_wake = lat["held"]
        out[lat["model"]].ttft = (lat["tn"], lat["tq"] if lat["tn"] else None)
        out[lat["model"]].itl = (lat["inn"], lat["iq"] if lat["inn"] else None)
    for model, slo in slos.items():
        if model in out and slo.any:
            out[model].met_slo = rows.filter(model=model).filter(_met(slo)).count()
    return out


def served_percentiles(model: str, since: datetime, which: str, extra: Sequence[float]) -> tuple[int, list[float]]:
    """The count and QUANTILES (seconds) of ``which`` ("ttft" or "itl") over one served model name's served
    requests that ended since ``since`` and ``extra`` values (the requests in flight, console.observability.
    in_flight): ``percentile_cont`` over the column and ``unnest`` of the values, one query. Raises KeyError for
    another ``which``."""
    column = {"ttft": "ttft_seconds", "itl": "itl"}[which]
    rows = RequestLog.objects.filter(created_at__gte=since, model=model).annotate(outcome=OUTCOME, itl=ITL)
    served = rows.filter(outcome__in=SERVED, **{f"{column}__isnull": False}).values_list(column)
    sql, params = served.query.sql_with_params()
    quantiles = ", ".join(str(q) for q in QUANTILES)
    # the ORM's own SQL (its values passed as parameters) and the constant QUANTILES: nothing a user wrote
    pick = f"SELECT count(v), percentile_cont(ARRAY[{quantiles}]::float8[]) WITHIN GROUP (ORDER BY v)"
    query = f"{pick} FROM ({sql} UNION ALL SELECT unnest(%s::float8[])) AS t(v)"
    with connection.cursor() as cursor:
        cursor.execute(query, [*params, list(extra)])
        n, values = cursor.fetchone()
    return n, values


def _met(slo: Slo) -> Q:
    """Slo.met as a condition: served, and within each target that is set (an ITL target passes a request
    with no ITL, as in Python)."""
    cond = Q(outcome__in=SERVED)
    if slo.ttft_seconds is not None:
        cond &= Q(ttft_seconds__lte=slo.ttft_seconds)
    if slo.itl_seconds is not None:
        cond &= Q(itl__isnull=True) | Q(itl__lte=slo.itl_seconds)
    return cond
