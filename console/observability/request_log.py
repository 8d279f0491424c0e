"""The request log as the console shows and exports it: a search by request id (the gateway's or the client's,
gateway.request_ids), each request's cost as text with its unit, and the CSV export of the rows a filter picks.

Cost: RequestLog.cost_usd is what the request was charged, in USD to the nano-dollar; NULL where no price applied
(a deployment without a price per token: on CPU or no GPU price, and none set by an admin). The page says "—" there,
never "$0", which would claim a price of nothing; the CSV leaves the cell empty so its column stays numbers.
"""

import csv
import io
from collections.abc import Iterable, Iterator
from decimal import Decimal

from django.db.models import Q, QuerySet

from console.observability.models import RequestLog
from console.observability.outcomes import outcome_of
from console.spreadsheet import safe_cell
from console.templatetags.usd_amounts import usd_text

NO_PRICE = "—"
# the export's header; times in UTC (ISO 8601), durations in seconds to the millisecond, cost in USD; the class the
# request ran at (console.access.models.Priority) and, for a Batch API line, its batch's id; why it failed, as its
# client was told; the max_tokens the gateway fitted it to, and the one a cap set and whose cap (key, deployment, limit,
# budget); the seconds it was held for its engine's wake (empty: none). A cell is empty where there is no value, never
# 0, which stays for what is zero: no status (the client left before the engine's first bytes), tokens not counted,
# no price.
CSV_COLUMNS = (
    "time_utc",
    "request_id",
    "client_request_id",
    "key_prefix",
    "key_name",
    "model",
    "endpoint",
    "stream",
    "status",
    "outcome",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "ttft_seconds",
    "duration_seconds",
    "cost_usd",
    "priority",
    "batch_id",
    "error",
    "max_tokens_fitted",
    "max_tokens_capped",
    "max_tokens_capped_by",
    "wake_seconds",
    "reasoning_tokens",
    "tool_call_failures",
)


def with_request_id(rows: QuerySet[RequestLog], request_id: str) -> QuerySet[RequestLog]:
    """The rows whose gateway id or client id is ``request_id`` (exactly: an id is not a phrase)."""
    return rows.filter(Q(request_id=request_id) | Q(client_request_id=request_id))


def cost_text(cost_usd: Decimal | None) -> str:
    """A request's cost as the page shows it (console.templatetags.usd_amounts.usd_text: "$0.0123", "$0.000067",
    exact zero as "$0.00"); NO_PRICE for None (no price applied)."""
    return NO_PRICE if cost_usd is None else usd_text(cost_usd)


def csv_lines(rows: Iterable[RequestLog]) -> Iterator[str]:
    """The CSV document of ``rows`` (CSV_COLUMNS, RFC 4180 quoting, cells a spreadsheet would run as formulas
    made text: console.spreadsheet), a line at a time: the rows are read in chunks and never held as model
    objects all at once (Django's ASGI handler still gathers the lines of a synchronous iterator before sending)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    yield _taken(out)
    for r in rows:
        writer.writerow([safe_cell(v) for v in _cells(r)])
        yield _taken(out)


def _cells(r: RequestLog) -> tuple[object, ...]:
    outcome = outcome_of(r.status, r.finish_reason, r.truncated, r.client_cancelled, r.completion_tokens)
    key = r.api_key
    return (
        r.created_at.isoformat(),
        r.request_id or "",
        r.client_request_id or "",
        r.key_prefix or (key.prefix if key else ""),
        key.name if key else "",
        r.model,
        r.endpoint,
        r.stream,
        r.status or "",  # 0: no answer had begun (the page's "—")
        outcome,
        r.finish_reason,
        r.prompt_tokens,
        r.completion_tokens,
        r.cached_tokens,
        _seconds(r.ttft_seconds),
        _seconds(r.duration_seconds),
        "" if r.cost_usd is None else format(r.cost_usd.normalize(), "f"),
        r.priority,
        r.batch_id,
        r.error,
        "" if r.max_tokens_fitted is None else r.max_tokens_fitted,
        "" if r.max_tokens_capped is None else r.max_tokens_capped,
        r.max_tokens_capped_by,
        _seconds(r.wake_seconds) if r.woke_engine else "",
        r.reasoning_tokens,
        r.tool_call_failures,
    )


def _seconds(value: float | None) -> float | str:
    """Seconds to the millisecond ("65.866", not the float's "65.86557259200026"); "" for none."""
    return "" if value is None else round(value, 3)


def _taken(out: io.StringIO) -> str:
    text = out.getvalue()
    out.seek(0)
    out.truncate()
    return text
