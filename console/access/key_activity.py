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
# As the Usage page counts a request (console.observability.request_stats_sql.OUTCOME_WHERE, on the key's rows):
# refused, a 4xx the client is to fix (a limit, a budget, a bad request); failed, the service's error (a 5xx, no
# answer) or a stream cut short. A client that left is neither.
_ENDED = Q(requests__client_cancelled=False, requests__truncated=False)
REFUSED = _ENDED & Q(requests__status__gte=400, requests__status__lt=500)
FAILED = Q(requests__client_cancelled=False) & (
    Q(requests__truncated=True) | Q(requests__status__gte=500) | Q(requests__status=0)
)


def with_activity(keys: QuerySet[ApiKey]) -> QuerySet[ApiKey]:
    """``keys`` annotated with ``requests_today``, ``refused_today`` and ``failed_today`` (of those, REFUSED and
    FAILED), ``tokens_today``, ``cost_today`` (USD, None: no price), the same for the month (``requests_month``,
    ``refused_month``, ``failed_month``, ``tokens_month``, ``cost_month``) and ``last_request_at`` (its latest
    logged request; None: never used)."""
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
