"""The audit log page (filters, newest first, 100 a page) and its CSV and JSON exports (same filters,
every matching entry). Admins only: console.access.policy says so."""

import json

from django.conf import settings
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from console.audit.models import AuditEntry
from console.audit.queries import COLUMNS, Filters, as_row
from console.audit.recording import ACTIONS, RETIRED_ACTIONS
from console.errors import ConsoleError
from console.spreadsheet import csv_text

PAGE_SIZE = 100
FILTERED_ACTIONS = {**ACTIONS, **RETIRED_ACTIONS}


def audit_page(request: HttpRequest) -> HttpResponse:
    said = {"actions": FILTERED_ACTIONS, "retention_days": settings.HEARTH_AUDIT_RETENTION_DAYS}
    try:
        filters = Filters.from_query(request.GET)
    except ConsoleError as exc:
        return render(request, "audit/audit.html", {**said, "error": str(exc)}, status=400)
    page = Paginator(filters.apply(AuditEntry.objects.all()), PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {**said, "page": page, "filters": filters, "query": query.urlencode()}
    return render(request, "audit/audit.html", context)


def audit_export(request: HttpRequest, fmt: str) -> HttpResponse:
    """Every entry the filters match, as ``audit-YYYYMMDD.csv`` or ``.json``; 400 for a bad filter."""
    try:
        filters = Filters.from_query(request.GET)
    except ConsoleError as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    rows = [as_row(e) for e in filters.apply(AuditEntry.objects.all()).iterator()]
    if fmt == "json":
        body, kind = json.dumps(rows, indent=1), "application/json"
    else:
        cells = ([json.dumps(r[c]) if c == "changes" else r[c] for c in COLUMNS] for r in rows)
        body, kind = csv_text(COLUMNS, cells), "text/csv; charset=utf-8"
    resp = HttpResponse(body, content_type=kind)
    resp["Content-Disposition"] = f'attachment; filename="audit-{timezone.now():%Y%m%d}.{fmt}"'
    return resp
