"""The usage page (by key, member or model, and class, day by day) and its CSV export, with the same filters."""

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.errors import ConsoleError
from console.spreadsheet import csv_text
from console.usage.aggregation import BATCH, GROUPS, NO_PRICE, Window, totals, usage

COLUMNS = (
    "day",
    "group",
    "class",
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "errors",
    "refused",
    "cost_usd",
)


def _query(request: HttpRequest) -> tuple[str, Window]:
    group = request.GET.get("group", "key")
    return group, Window.parse(request.GET.get("since", "")[:10], request.GET.get("until", "")[:10])


def usage_page(request: HttpRequest) -> HttpResponse:
    try:
        group, window = _query(request)
        rows = usage(request.user, group, window)
    except ConsoleError as exc:
        return render(request, "usage/usage.html", {"error": str(exc), "groups": GROUPS}, status=400)
    batch = [r for r in rows if r.priority == BATCH]
    context = {
        "rows": rows,
        "totals": totals(rows, window.until, "total"),
        "batch_totals": totals(batch, window.until, BATCH) if batch else None,
        "factor": settings.HEARTH_BATCH_PRICE_FACTOR,
        "group": group,
        "window": window,
        "groups": GROUPS,
        "no_price": NO_PRICE,
        "query": request.GET.urlencode(),
    }
    return render(request, "usage/usage.html", context)


def usage_export(request: HttpRequest) -> HttpResponse:
    """The page's rows as CSV (``class`` the requests' priority class; ``cost_usd`` in USD, empty for no price); 400
    for a bad filter."""
    try:
        group, window = _query(request)
        rows = usage(request.user, group, window)
    except ConsoleError as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    header = (*COLUMNS[:1], group, *COLUMNS[2:])
    cells = (
        [
            r.day.isoformat(),
            r.group,
            r.priority,
            r.requests,
            r.prompt_tokens,
            "" if r.cached_tokens is None else r.cached_tokens,
            r.completion_tokens,
            r.errors,
            r.refused,
            "" if r.cost_usd is None else format(r.cost_usd.normalize(), "f"),
        ]
        for r in rows
    )
    resp = HttpResponse(csv_text(header, cells), content_type="text/csv; charset=utf-8")
    resp["Content-Disposition"] = f'attachment; filename="usage-by-{group}-{window.since}-{window.until}.csv"'
    return resp
