"""The request log's rows as the gateway hands them over, and how they are written: once per request id, whoever
writes them and however often.

A row is a dict of RequestLog's columns (COLUMNS) with plain JSON values: ``created_at`` in Unix seconds,
``cost_usd`` in nano-USD (None: no price), the rest as the columns hold them. The gateway spools rows through
Redis (console.observability.request_spool) and a reader writes them here in batches; a batch written again (its
reader died before it said so) changes nothing: the insert skips a request id already there (``ON CONFLICT DO
NOTHING``, PostgreSQL and SQLite 3.24+).

A batch the database refuses for what is in it rather than for being unreachable (a key deleted meanwhile, a
value too long for its column) is written row by row: a row refused again is written without its key and with
its strings cut to their columns' lengths, and one refused even then is logged and dropped, so that one bad row
never holds up the others. Any other database error is raised: the caller keeps the rows and tries again.
"""

import json
import logging
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from typing import Any

from django.db import DataError, IntegrityError, connection, transaction

from console.observability.models import RequestLog

log = logging.getLogger(__name__)
NANO = Decimal(10) ** 9  # nano-USD per USD
INCOMING = "hearth_requestlog_incoming"  # PostgreSQL: the session's temporary table a batch is copied into

Row = dict[str, Any]

# RequestLog's columns, in the order of the insert's parameters (a test checks that they are all of its columns)
COLUMNS = (
    "request_id",
    "created_at",
    "api_key_id",
    "model",
    "surface",
    "endpoint",
    "stream",
    "status",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "ttft_seconds",
    "duration_seconds",
    "truncated",
    "client_cancelled",
    "usage_estimated",
    "reasoning_tokens",
    "tool_call_failures",
    "length_cut",
    "empty_answer",
    "cost_usd",
    "key_prefix",
    "woke_engine",
    "wake_seconds",
    "client_request_id",
    "priority",
    "batch_id",
    "error",
    "max_tokens_fitted",
    "max_tokens_capped",
    "max_tokens_capped_by",
)


def encode(row: Row) -> str:
    """The row as compact JSON, for the spool."""
    return json.dumps(row, separators=(",", ":"))


def decode(text: str | bytes) -> Row:
    """A row from ``encode``. Raises ValueError for text that is not a JSON object."""
    row = json.loads(text)
    if not isinstance(row, dict):
        raise ValueError("a spooled request log row is not a JSON object")
    return row


def write_rows(rows: list[Row]) -> int:
    """Insert ``rows`` in one transaction, skipping request ids already written: on PostgreSQL through ``COPY``
    (``_copy_in``: 36 µs of CPU a row where ``executemany`` took 99, its parameters quoted in Python by psycopg's
    client-side binding; bench/README.md), elsewhere with one prepared statement (``executemany``). Falls back to
    row by row as the module docstring says. Returns the rows handed over that were written or found already there
    (those dropped are not counted). Raises what the driver raises while the database is unreachable or cannot
    write (a full disk, or a role without PostgreSQL's TEMPORARY privilege, which every role has by default)."""
    if not rows:
        return 0
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            values = [_values(r) for r in rows]
            if connection.vendor == "postgresql":
                with connection.wrap_database_errors:  # psycopg's errors as Django's, as the wrapper raises them
                    _copy_in(cursor.cursor, values)  # psycopg's cursor under Django's wrapper
            else:
                cursor.executemany(_insert_sql(), values)
        return len(rows)
    except (IntegrityError, DataError):
        log.warning("a batch of %d request log rows was refused; writing them one by one", len(rows))
    return sum(_write_one(row) for row in rows)


def _write_one(row: Row) -> int:
    for attempt in (row, _mended(row)):
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(_insert_sql(), _values(attempt))
            return 1
        except (IntegrityError, DataError) as exc:
            refusal = exc
    log.error("request log row %s dropped: the database refuses it (%s)", row.get("request_id"), refusal)
    return 0


def _mended(row: Row) -> Row:
    """The row without its key (deleted since), its strings cut to their columns' lengths."""
    mended = {**row, "api_key_id": None}
    for name in ("model", "surface", "endpoint", "finish_reason", "key_prefix", "batch_id", "error"):
        limit = getattr(RequestLog._meta.get_field(name), "max_length", None)
        if isinstance(mended.get(name), str) and limit:
            mended[name] = mended[name][:limit]
    return mended


@cache
def _insert_sql() -> str:
    quote = connection.ops.quote_name
    columns, values = ", ".join(quote(c) for c in COLUMNS), ", ".join(["%s"] * len(COLUMNS))
    table, unique = quote(RequestLog._meta.db_table), quote("request_id")
    # identifiers from this module and the model, quoted; every value goes in as a parameter
    return f"INSERT INTO {table} ({columns}) VALUES ({values}) ON CONFLICT ({unique}) DO NOTHING"  # noqa: S608


def _copy_in(cursor: Any, values: list[tuple[Any, ...]]) -> None:
    """``values`` (rows in COLUMNS' order) copied into a temporary table of this session (``COPY``, its rows
    formatted by psycopg's C code), then moved from there, skipping request ids already written. ``cursor`` is
    psycopg's own, inside the caller's transaction (a failure leaves the temporary table as it was: empty)."""
    quote = connection.ops.quote_name
    table, columns = quote(RequestLog._meta.db_table), ", ".join(quote(c) for c in COLUMNS)
    # identifiers from this module and the model; every value goes through COPY
    create = f"CREATE TEMP TABLE IF NOT EXISTS {INCOMING} AS SELECT {columns} FROM {table} WITH NO DATA"  # noqa: S608
    cursor.execute(create)
    with cursor.copy(f"COPY {INCOMING} ({columns}) FROM STDIN") as copy:
        for row in values:
            copy.write_row(row)
    cursor.execute(
        f"WITH moved AS (DELETE FROM {INCOMING} RETURNING {columns}) "  # noqa: S608
        f"INSERT INTO {table} ({columns}) SELECT {columns} FROM moved ON CONFLICT ({quote('request_id')}) DO NOTHING"
    )


def _values(row: Row) -> tuple[Any, ...]:
    ops = connection.ops
    created = ops.adapt_datetimefield_value(datetime.fromtimestamp(row["created_at"], UTC))
    cost = row.get("cost_usd")
    values = {**row, "created_at": created, "cost_usd": None if cost is None else Decimal(int(cost)) / NANO}
    defaults = {"finish_reason": "", "key_prefix": "", "tool_call_failures": 0, "priority": "standard", "batch_id": ""}
    defaults["error"] = defaults["max_tokens_capped_by"] = ""  # a row an older gateway spooled
    flags = ("stream", "truncated", "client_cancelled", "usage_estimated", "length_cut", "empty_answer", "woke_engine")
    for flag in flags:
        defaults[flag] = False
    return tuple(values.get(c, defaults.get(c)) for c in COLUMNS)
