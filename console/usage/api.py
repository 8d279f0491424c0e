"""Usage's part of the JSON API: GET /api/usage, rows by UTC day, key, member or model, and class."""

from datetime import date

from django.http import HttpRequest
from ninja import Router, Schema

from console.usage.aggregation import UsageRow, Window, usage

router = Router(tags=["usage"])


class UsageOut(Schema):
    day: date
    group: str
    priority: str  # the class its requests ran at: interactive, standard or batch
    requests: int
    prompt_tokens: int
    cached_tokens: int | None  # None: no request of the row had a count (its engine reports none)
    completion_tokens: int
    errors: int  # the service's failures: engine errors, 5xx, streams the engine cut short
    refused: int  # 4xx answers: a key, a quota, a bad request (a request whose client left is neither)
    cost_usd: float | None  # USD the gateway charged; None: no request of the row had a price


@router.get("/usage", response=list[UsageOut])
def usage_rows(request: HttpRequest, group: str = "key", since: str = "", until: str = "") -> list[UsageRow]:
    """``group``: key, member or model, each split by class (``priority``); ``since``/``until``: YYYY-MM-DD (UTC,
    both included; default the last 30 days). Members get their own keys' usage only."""
    return usage(request.user, group, Window.parse(since[:10], until[:10]))
