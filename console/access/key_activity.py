"""What each key did today and this month (UTC), for the keys pages: requests and tokens (prompt +
completion), read through the key's ``requests`` relation (console.observability's RequestLog points
here; access never imports it), in one query for the whole list.

A key refused for a budget: the latest such refusal's message, within REFUSED_WITHIN seconds today (the gateway's
budget counters are in Redis; its refusal says which budget and when it renews), so a page does not call a key
"active" while every request of it is refused.

Cost: the sum of the request log's ``cost_usd``, what the gateway charged to the key's budgets (tokens × the
deployment's steady price per token, console.observability.pricing; the one definition of a key's cost). None
when no request of the period had a price (a deployment on CPU or without a GPU price): "no price", never $0.
"""

import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from functools import reduce
from operator import or_
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, F, Max, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from console.access.models import ApiKey

NO_PRICE = "no price"


def _outcomes(rows: str) -> tuple[Q, Q]:
    """(refused, failed) of the request rows reached by the lookup ``rows`` ("requests" from a key)."""
    ended = Q(**{f"{rows}__client_cancelled": False, f"{rows}__truncated": False})
    refused = ended & Q(**{f"{rows}__status__gte": 400, f"{rows}__status__lt": 500})
    failed = Q(**{f"{rows}__client_cancelled": False}) & (
        Q(**{f"{rows}__truncated": True}) | Q(**{f"{rows}__status__gte": 500}) | Q(**{f"{rows}__status": 0})
    )
    return refused, failed


# As the Usage page counts a request (console.observability.request_stats_sql.OUTCOME_WHERE, on the key's rows):
# refused, a 4xx the client is to fix (a limit, a budget, a bad request); failed, the service's error (a 5xx, no
# answer) or a stream cut short. A client that left is neither.
REFUSED, FAILED = _outcomes("requests")

# How the gateway's refusal for each budget begins (gateway.quotas.BUDGETS, its 429's message as the request log keeps
# it), by whose budget and period; such a refusal counts for REFUSED_WITHIN seconds (a budget an admin raised, or a
# client that stopped asking, ends it).
REFUSED_WITHIN = 600
# How such a refusal ends when the request would pass with a lower output limit (the budget is not spent for smaller
# requests): the alerts do not call that budget spent (console.alerts.conditions.budget).
FEWER_OUTPUT_TOKENS = "ask for fewer output tokens (max_tokens) to pass now"
REFUSED_FOR = {
    ("key", "today"): "This key's daily budget of $",
    ("key", "this month"): "This key's monthly budget of $",
    ("member", "today"): "The daily budget of this key's owner (over all their keys) of $",
    ("member", "this month"): "The monthly budget of this key's owner (over all their keys) of $",
}


def _budget_refusal() -> Subquery:
    """The message of a key's latest refusal for a budget within REFUSED_WITHIN seconds today (UTC), else None."""
    now = timezone.now()
    since = max(now - timedelta(seconds=REFUSED_WITHIN), now.replace(hour=0, minute=0, second=0, microsecond=0))
    logged = ApiKey._meta.get_field("requests").related_model  # the request log (access never imports it)
    budget = reduce(or_, (Q(error__startswith=start) for start in REFUSED_FOR.values()))
    latest = logged._default_manager.filter(budget, api_key=OuterRef("pk"), status=429, created_at__gte=since)
    return Subquery(latest.order_by("-created_at").values("error")[:1])


_RENEWS = re.compile(r"; it renews in [\d,]+ s(?: \(at (?P<at>[^)]+)\))?\.$")


def budget_words(message: str | None) -> str:
    """A budget refusal's message for a key's status, without its countdown (stale once logged): "This key's daily
    budget of $1.00 is spent; it renews in 3,600 s (at 2026-12-08 00:00 UTC)." → "This key's daily budget of $1.00 is
    spent; it renews 2026-12-08 00:00 UTC". None → ""."""
    if not message:
        return ""
    found = _RENEWS.search(message)
    if not found:
        return message
    when = found["at"] or "within a minute"
    return f"{message[: found.start()]}; it renews {when}"


def with_budget_refusal(keys: QuerySet[ApiKey]) -> QuerySet[ApiKey]:
    """``keys`` annotated with ``budget_refusal`` alone (module docstring; None: none), for a status beside others'."""
    return keys.annotate(budget_refusal=_budget_refusal())


def with_activity(keys: QuerySet[ApiKey]) -> QuerySet[ApiKey]:
    """``keys`` annotated with ``requests_today``, ``refused_today`` and ``failed_today`` (of those, REFUSED and
    FAILED), ``tokens_today``, ``cost_today`` (USD, None: no price), the same for the month (``requests_month``,
    ``refused_month``, ``failed_month``, ``tokens_month``, ``cost_month``), ``last_request_at`` (its latest
    logged request; None: never used) and ``budget_refusal`` (module docstring; None: none)."""
    day = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    today, month = Q(requests__created_at__gte=day), Q(requests__created_at__gte=day.replace(day=1))
    tokens = Coalesce(F("requests__prompt_tokens"), Value(0)) + Coalesce(F("requests__completion_tokens"), Value(0))
    return keys.annotate(
        requests_today=Count("requests", filter=today),
        refused_today=Count("requests", filter=today & REFUSED),
        failed_today=Count("requests", filter=today & FAILED),
        tokens_today=Coalesce(Sum(tokens, filter=today), Value(0)),
        cost_today=Sum("requests__cost_usd", filter=today),
        requests_month=Count("requests", filter=month),
        refused_month=Count("requests", filter=month & REFUSED),
        failed_month=Count("requests", filter=month & FAILED),
        tokens_month=Coalesce(Sum(tokens, filter=month), Value(0)),
        cost_month=Sum("requests__cost_usd", filter=month),
        last_request_at=Max("requests__created_at"),
        budget_refusal=_budget_refusal(),
    )


@dataclass(frozen=True)
class Spent:
    """What a member's keys were charged together today and this month (UTC, USD; None: nothing priced), the
    windows their daily and monthly budgets count."""

    today: Decimal | None
    month: Decimal | None


def with_spent(people: QuerySet[Any]) -> QuerySet[Any]:
    """``people`` (users) annotated with ``cost_today`` and ``cost_month``: the sum of the costs of their keys'
    requests today and this month (module docstring; USD, None: nothing priced), and ``ran_today`` and
    ``ran_month``, those of the requests neither refused nor failed (none ran: charged nothing), in one query for
    the whole list."""
    day = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    today = Q(api_keys__requests__created_at__gte=day)
    month = Q(api_keys__requests__created_at__gte=day.replace(day=1))
    refused, failed = _outcomes("api_keys__requests")
    annotated: QuerySet[Any] = people.annotate(
        cost_today=Sum("api_keys__requests__cost_usd", filter=today),
        cost_month=Sum("api_keys__requests__cost_usd", filter=month),
        ran_today=Count("api_keys__requests", filter=today & ~refused & ~failed),
        ran_month=Count("api_keys__requests", filter=month & ~refused & ~failed),
    )
    return annotated


def spent_by(owner: Any) -> Spent:
    """The sum of the costs of ``owner``'s keys' requests today and this month (``with_spent``)."""
    sums = with_spent(get_user_model().objects.filter(pk=owner.pk)).values("cost_today", "cost_month").get()
    return Spent(sums["cost_today"], sums["cost_month"])
