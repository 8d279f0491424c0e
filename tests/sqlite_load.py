"""One process of tests/test_sqlite_default.py's load on the embedded SQLite database (DATABASE_URL unset).

Usage: ``python tests/sqlite_load.py ROLE SECONDS``. For SECONDS it writes and reads as ROLE does, the way the
appliance's processes do, and prints one JSON line: operations done, "database is locked" errors met, other
errors. ROLE ``web``: request log batches (the gateway's spool writer), transactions that read before they
write (a key's limits changed, an audit entry), the dashboard's reads of the request log. ROLE ``worker``:
scrape-like writes (a sample, the replica's scrape health got or made, then updated), a rollup's bulk insert in
one transaction, a prune's delete, all while ``reader`` processes hold long reads (the dashboard's queries).
"""

import json
import os
import secrets
import sys
import time
from collections.abc import Callable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
import django

django.setup()

from django.db import OperationalError, connection, transaction  # noqa: E402
from django.db.models import Avg, Count  # noqa: E402
from django.utils import timezone  # noqa: E402

from console.audit.recording import record  # noqa: E402
from console.observability.models import HistogramBounds, RequestLog  # noqa: E402
from console.observability.request_rows import write_rows  # noqa: E402


def row() -> dict[str, object]:
    return {
        "request_id": secrets.token_hex(16),
        "created_at": time.time(),
        "model": "m",
        "surface": "openai",
        "endpoint": "/v1/chat/completions",
        "status": 200,
        "duration_seconds": 0.5,
        "completion_tokens": 64,
    }


def spool_batch() -> None:
    write_rows([row() for _ in range(50)])


def read_then_write() -> None:
    with transaction.atomic():
        seen = RequestLog.objects.count()  # a read first: a deferred transaction would take only a read lock here
        record(None, "price.set", "load", {"rows": seen})


def dashboard() -> None:
    list(RequestLog.objects.values("model").annotate(n=Count("id"), d=Avg("duration_seconds")))
    for _ in RequestLog.objects.values_list("id", "duration_seconds").iterator(chunk_size=100):
        pass  # a long read, row by row


def scrape_like() -> None:
    bounds, _ = HistogramBounds.objects.get_or_create(bounds=[secrets.randbelow(5), 1.0])
    HistogramBounds.objects.filter(pk=bounds.pk).update(bounds=bounds.bounds)


def rollup_like() -> None:
    made = [
        RequestLog(
            request_id=secrets.token_hex(16), created_at=timezone.now(), model="m", status=200, duration_seconds=1
        )
        for _ in range(200)
    ]
    with transaction.atomic():
        RequestLog.objects.bulk_create(made)


def prune_like() -> None:
    oldest = RequestLog.objects.order_by("id").values_list("id", flat=True)[:100]
    RequestLog.objects.filter(id__in=list(oldest)).delete()


ROLES: dict[str, list[Callable[[], None]]] = {
    "web": [spool_batch, read_then_write, dashboard],
    "worker": [scrape_like, read_then_write, rollup_like, prune_like],
    "reader": [dashboard],
}


def main() -> None:
    role, seconds = sys.argv[1], float(sys.argv[2])
    ops, locked, other = 0, 0, []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for op in ROLES[role]:
            try:
                op()
                ops += 1
            except OperationalError as exc:
                if "locked" in str(exc):
                    locked += 1
                else:
                    other.append(f"{op.__name__}: {exc}")
    mode = connection.cursor().execute("PRAGMA journal_mode").fetchone()[0]
    print(json.dumps({"role": role, "ops": ops, "locked": locked, "other": other[:5], "journal_mode": mode}))


if __name__ == "__main__":
    main()
