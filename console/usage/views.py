"""The usage page (by key, member or model, day by day) and its CSV export, with the same filters."""

from decimal import Decimal

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.errors import ConsoleError
from console.spreadsheet import csv_text
from console.usage.aggregation import GROUPS, NO_PRICE, UsageRow, Window, usage

COLUMNS = ("day", "group", "requests", "prompt_tokens", "cached_tokens", "completion_tokens", "errors", "cost_usd")


def _query(request: HttpRequest) -> tuple[str, Window]:
    group = request.GET.get("group", "key")
    return group, Window.parse(request.GET.get("since", "")[:10], request.GET.get("until", "")[:10])


def usage_page(request: HttpRequest) -> HttpResponse:
    try:
        group, window = _query(request)
        rows = usage(request.user, group, window)
    except ConsoleError as exc:
        return render(request, "usage/usage.html", {"error": str(exc), "groups": GROUPS}, status=400)
    costs = [r.cost_usd for r in rows if r.cost_usd is not None]
    sums = {f: sum(getattr(r, f) for r in rows) for f in COLUMNS[2:7]}
    totals = UsageRow(window.until, "total", **sums, cost_usd=sum(costs, Decimal(0)) if costs else None)
    context = {
        "rows": rows,
        "totals": totals,
        "group": group,
        "window": window,
        "groups": GROUPS,
        "no_price": NO_PRICE,
        "query": request.GET.urlencode(),
    }
    return render(request, "usage/usage.html", context)


def usage_export(request: HttpRequest) -> HttpResponse:
    """The page's rows as CSV (``cost_usd`` in USD, empty for no price); 400 for a bad filter."""
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
            r.requests,
            r.prompt_tokens,
            r.cached_tokens,
            r.completion_tokens,
            r.errors,
            "" if r.cost_usd is None else format(r.cost_usd.normalize(), "f"),
        ]
        for r in rows
    )
    resp = HttpResponse(csv_text(header, cells), content_type="text/csv; charset=utf-8")
    resp["Content-Disposition"] = f'attachment; filename="usage-by-{group}-{window.since}-{window.until}.csv"'
    return resp
