"""What each key did today and this month (UTC), for the keys pages: requests and tokens (prompt +
completion), read through the key's ``requests`` relation (console.observability's RequestLog points
here; access never imports it), in one query for the whole list.

Cost: the sum of the request log's ``cost_usd``, what the gateway charged to the key's budgets (tokens × the
deployment's steady price per token, console.observability.pricing; the one definition of a key's cost). None
when no request of the period had a price (a deployment on CPU or without a GPU price): "no price", never $0.
"""

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import Count, F, Max, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from console.access.models import ApiKey

NO_PRICE = "no price"
FAILED = Q(requests__status__gte=400)


def with_activity(keys: QuerySet[ApiKey]) -> QuerySet[ApiKey]:
    """``keys`` annotated with ``requests_today``, ``failed_today`` (of those, answered with an error: refused
    by a limit, the gateway or the engine), ``tokens_today``, ``cost_today`` (USD, None: no price),
    ``requests_month``, ``failed_month``, ``tokens_month``, ``cost_month`` and ``last_request_at`` (its latest
    logged request; None: never used)."""
    day = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    today, month = Q(requests__created_at__gte=day), Q(requests__created_at__gte=day.replace(day=1))
    tokens = Coalesce(F("requests__prompt_tokens"), Value(0)) + Coalesce(F("requests__completion_tokens"), Value(0))
    return keys.annotate(
        requests_today=Count("requests", filter=today),
        failed_today=Count("requests", filter=today & FAILED),
        tokens_today=Coalesce(Sum(tokens, filter=today), Value(0)),
        cost_today=Sum("requests__cost_usd", filter=today),
        requests_month=Count("requests", filter=month),
        failed_month=Count("requests", filter=month & FAILED),
        tokens_month=Coalesce(Sum(tokens, filter=month), Value(0)),
        cost_month=Sum("requests__cost_usd", filter=month),
        last_request_at=Max("requests__created_at"),
    )


@dataclass(frozen=True)
class Spent:
    """What a member's keys were charged together today and this month (UTC, USD; None: nothing priced), the
    windows their daily and monthly budgets count."""

    today: Decimal | None
    month: Decimal | None


def spent_by(owner: Any) -> Spent:
    """The sum of the costs of ``owner``'s keys' requests today and this month (module docstring)."""
    day = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    today, month = Q(requests__created_at__gte=day), Q(requests__created_at__gte=day.replace(day=1))
    sums = ApiKey.objects.filter(owner=owner).aggregate(
        today=Sum("requests__cost_usd", filter=today), month=Sum("requests__cost_usd", filter=month)
    )
    return Spent(sums["today"], sums["month"])
