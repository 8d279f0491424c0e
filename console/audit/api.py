"""Audit's part of the JSON API: GET /api/audit, the entries the filters match, newest first."""

from typing import Any

from django.http import HttpRequest
from ninja import Router

from console.audit.models import AuditEntry
from console.audit.queries import Filters, as_row

router = Router(tags=["audit"])
LIMIT = 1000


@router.get("/audit")
def audit_entries(request: HttpRequest) -> list[dict[str, Any]]:
    """Up to 1,000 entries, newest first; filters as the audit page's (``actor``, ``action``, ``target``,
    ``since``, ``until``: YYYY-MM-DD, UTC). Exports of everything: /audit/export.json and .csv."""
    return [as_row(e) for e in Filters.from_query(request.GET).apply(AuditEntry.objects.all())[:LIMIT]]
