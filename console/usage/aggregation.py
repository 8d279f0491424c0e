"""Usage by UTC day, by key, member or model, and by class (interactive, standard, batch: the priority each request
ran at, RequestLog.priority), from the request log (one GROUP BY query).

Members see only their own keys' requests; admins and viewers everyone's. Errors are requests that
answered 4xx/5xx or whose stream the engine ended without its terminal event. Cost: the sum of the request
log's ``cost_usd`` (what the gateway charged: tokens × the deployment's steady price per token; the one
definition of a key's cost, console.observability.cost; batch-class requests at HEARTH_BATCH_PRICE_FACTOR of it);
None when no request of the row had a price, shown as "no price".
"""

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDate

from console.access.models import Priority
from console.access.roles import may_see_all
from console.errors import ConsoleError
from console.observability import outcomes
from console.observability.models import RequestLog
from console.observability.request_stats_sql import OUTCOME_WHERE

GROUPS = {"key": "api_key__name", "member": "api_key__owner__username", "model": "model"}
MAX_DAYS = 366
LAST_DAY = date.max - timedelta(days=1)  # a window is read up to the midnight after its end, which must exist
NO_PRICE = "no price"
BATCH = Priority.BATCH.value
# How a request ended, as console.observability.outcomes.outcome_of says: the service's failures (ERRORS) and the
# refusals (REFUSALS); a cancelled one is neither, whatever its status.
ERRORS = Q(*(OUTCOME_WHERE[outcome] for outcome in outcomes.ERRORS), _connector=Q.OR)
REFUSED = Q(*(OUTCOME_WHERE[outcome] for outcome in outcomes.REFUSALS), _connector=Q.OR)


@dataclass(frozen=True)
class UsageRow:
    day: date
    group: str  # the key's name and prefix, the member's username, or the model name
    requests: int
    prompt_tokens: int
    cached_tokens: int | None  # None: no request of the row had a count (an engine that does not report one)
    completion_tokens: int
    errors: int  # the service's failures: engine errors, 5xx, streams cut short (as the dashboard counts them)
    refused: int  # 4xx: a key, a quota, a bad request, the client's to fix (a client that left is neither)
    cost_usd: Decimal | None = None  # None: no request of the row had a price
    priority: str = ""  # the class its requests ran at (console.access.models.Priority); "" for a total


def totals(rows: list[UsageRow], day: date, label: str) -> UsageRow:
    """The sums of ``rows`` as one row of ``day`` named ``label``; its cost, or cached tokens, None when none of
    them had one."""
    costs = [r.cost_usd for r in rows if r.cost_usd is not None]
    cached = [r.cached_tokens for r in rows if r.cached_tokens is not None]
    return UsageRow(
        day,
        label,
        sum(r.requests for r in rows),
        sum(r.prompt_tokens for r in rows),
        sum(cached) if cached else None,
        sum(r.completion_tokens for r in rows),
        sum(r.errors for r in rows),
        sum(r.refused for r in rows),
        sum(costs, Decimal(0)) if costs else None,
    )


@dataclass(frozen=True)
class Window:
    """Whole UTC days from ``since`` to ``until``, both included."""

    since: date
    until: date

    @classmethod
    def parse(cls, since: str = "", until: str = "", today: date | None = None) -> "Window":
        """From YYYY-MM-DD strings; empty: the last 30 days to today (fewer from 0001-01-01). Raises ConsoleError
        for a bad date, one after LAST_DAY, an inverted window or one over MAX_DAYS days."""
        today = today or datetime.now(UTC).date()
        try:
            end = date.fromisoformat(until) if until.strip() else today
            start = date.fromisoformat(since) if since.strip() else date.fromordinal(max(end.toordinal() - 29, 1))
        except ValueError:
            raise ConsoleError("Give dates as YYYY-MM-DD.") from None
        if max(start, end) > LAST_DAY:
            raise ConsoleError(f"Give dates no later than {LAST_DAY}.")
        if start > end:
            raise ConsoleError("The window's start is after its end.")
        if (end - start).days + 1 > MAX_DAYS:
            raise ConsoleError(f"Ask for at most {MAX_DAYS} days at a time.")
        return cls(start, end)

    def bounds(self) -> tuple[datetime, datetime]:
        return (
            datetime.combine(self.since, time.min, tzinfo=UTC),
            datetime.combine(self.until + timedelta(days=1), time.min, tzinfo=UTC),
        )


def visible_requests(user: Any) -> QuerySet[RequestLog]:
    logs = RequestLog.objects.all()
    return logs if may_see_all(user) else logs.filter(api_key__owner=user)


def usage(user: Any, group: str, window: Window) -> list[UsageRow]:
    """Rows by day (newest first), group (by name) and class (by name). Raises ConsoleError for an unknown
    group."""
    if group not in GROUPS:
        raise ConsoleError(f"Group by one of: {', '.join(GROUPS)}.")
    start, end = window.bounds()
    logs = visible_requests(user).filter(created_at__gte=start, created_at__lt=end)
    field = GROUPS[group]
    names = [field, "api_key__prefix", "priority"] if group == "key" else [field, "priority"]
    rows = (
        logs.annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day", *names)
        .annotate(
            requests=Count("id"),
            prompt=Coalesce(Sum("prompt_tokens"), 0),
            cached=Sum("cached_tokens"),
            completion=Coalesce(Sum("completion_tokens"), 0),
            errors=Count("id", filter=ERRORS),
            refused=Count("id", filter=REFUSED),
            cost=Sum("cost_usd"),
        )
        .order_by("-day", *names)
    )
    return [
        UsageRow(
            r["day"],
            _label(group, r),
            r["requests"],
            r["prompt"],
            r["cached"],
            r["completion"],
            r["errors"],
            r["refused"],
            r["cost"],
            r["priority"],
        )
        for r in rows
    ]


def _label(group: str, row: dict[str, Any]) -> str:
    """The group's name as the page shows it; a row with none says why: "(no key)", "(no owner)", and "(no model)"
    for requests refused before their model was read (a malformed body)."""
    if group == "key":
        return f"{row['api_key__name']} ({row['api_key__prefix']}…)" if row["api_key__prefix"] else "(no key)"
    return row[GROUPS[group]] or f"(no {'owner' if group == 'member' else group})"
