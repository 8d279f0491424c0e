"""What each key did today and this month (UTC), for the keys pages: requests and tokens (prompt +
completion), read through the key's ``requests`` relation (console.observability's RequestLog points
here; access never imports it), in one query for the whole list.

Cost: no per-request price is recorded yet (the panels' cost figures are not there), so the pages say
"no price set" rather than show a number that is not known.
"""

from django.db.models import Count, F, Max, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from console.access.models import ApiKey

NO_PRICE = "no price set"


def with_activity(keys: QuerySet[ApiKey]) -> QuerySet[ApiKey]:
    """``keys`` annotated with ``requests_today``, ``tokens_today``, ``requests_month``, ``tokens_month`` and
    ``last_request_at`` (its latest logged request; None: never used)."""
    day = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    today, month = Q(requests__created_at__gte=day), Q(requests__created_at__gte=day.replace(day=1))
    tokens = Coalesce(F("requests__prompt_tokens"), Value(0)) + Coalesce(F("requests__completion_tokens"), Value(0))
    return keys.annotate(
        requests_today=Count("requests", filter=today), tokens_today=Coalesce(Sum(tokens, filter=today), Value(0)),
        requests_month=Count("requests", filter=month), tokens_month=Coalesce(Sum(tokens, filter=month), Value(0)),
        last_request_at=Max("requests__created_at"),
    )  # fmt: skip
