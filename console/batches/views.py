"""The Batches page (every batch an admin or viewer may see, a member's own keys' batches), a batch's own page, the
fragments their htmx polls refresh every 2 s, cancel (audited), and the output and error files as downloads.

Who sees what follows the Requests and Usage pages (console.access.roles.may_see_all): a member reaches only the
batches of their own keys; another's batch, and its files, answer 404 as if there were none. Cancel and the
downloads (the lines' content) are for the key's holder and admins (console.access.roles.may_manage_key); viewers
read the table only (console.access.policy)."""

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from console.access.roles import may_manage_key, may_see_all
from console.audit.recording import record
from console.batches import batches, files
from console.batches.models import RUNNING, Batch, BatchFile, LineState
from console.batches.progress import CANCELLABLE, RATE_WINDOW, progress

LISTED = 200  # batches on the page, newest first
ERROR_LINES = 20  # failed lines shown on a batch's page (all of them in its error file)
TIMES = (  # a batch's page's times, after created: (label, Batch field)
    ("In progress", "in_progress_at"),
    ("Finalizing", "finalizing_at"),
    ("Completed", "completed_at"),
    ("Failed", "failed_at"),
    ("Expired", "expired_at"),
    ("Cancelling", "cancelling_at"),
    ("Cancelled", "cancelled_at"),
)


def visible(user: Any) -> QuerySet[Batch]:
    """The batches ``user`` may see: all for admins and viewers, their own keys' for a member."""
    rows = Batch.objects.select_related("key", "key__owner", "output_file", "error_file")
    return rows if may_see_all(user) else rows.filter(key__owner=user)


def _list_context(request: HttpRequest) -> dict[str, object]:
    rows = list(visible(request.user)[:LISTED])
    shown = progress(rows, datetime.now(UTC))
    return {"rows": shown, "may_act": _may_act(request.user, rows)} | _shared(request)


def _shared(request: HttpRequest) -> dict[str, object]:
    return {
        "sees_all": may_see_all(request.user),
        "factor_pct": f"{settings.HEARTH_BATCH_PRICE_FACTOR * 100:g} %",
        "rate_window": RATE_WINDOW // 60,
        "listed": LISTED,
    }


def _may_act(user: Any, rows: list[Batch]) -> set[int]:
    """The pks of the batches ``user`` may cancel and download."""
    return {b.pk for b in rows if may_manage_key(user, b.key)}


def batch_list(request: HttpRequest) -> HttpResponse:
    """Every batch the user may see, newest first, with progress, rate, ETA and cost."""
    return render(request, "batches/batches.html", _list_context(request))


def batch_rows(request: HttpRequest) -> HttpResponse:
    """The table alone, polled every 2 s by htmx while a batch runs."""
    return render(request, "batches/batches.html#table", _list_context(request))


def _detail_context(request: HttpRequest, public_id: str) -> dict[str, object]:
    batch = get_object_or_404(visible(request.user), public_id=public_id)
    failed = batch.lines.filter(state=LineState.FAILED).order_by("index")[:ERROR_LINES]
    return {
        "p": progress([batch], datetime.now(UTC))[0],
        "b": batch,
        "may_act": _may_act(request.user, [batch]),
        "failed_lines": [(line.index + 1, line.custom_id, line.answer or {}) for line in failed],
        "error_lines": ERROR_LINES,
        "times": [(label, at) for label, name in TIMES if (at := getattr(batch, name)) is not None],
        "live": batch.status in RUNNING,
    } | _shared(request)


def batch_detail(request: HttpRequest, public_id: str) -> HttpResponse:
    """One batch: its progress, its times in each status, its files and its errors; whether its input file was
    deleted since (read here, not in every poll of the live part, which does not show it)."""
    context = _detail_context(request, public_id)
    batch: Batch = context["b"]  # type: ignore[assignment]
    deleted = not BatchFile.objects.filter(public_id=batch.input_file_id).exists()
    return render(request, "batches/batch.html", {**context, "input_deleted": deleted})


def batch_progress(request: HttpRequest, public_id: str) -> HttpResponse:
    """A batch's page's live part alone, polled every 2 s by htmx while it runs."""
    return render(request, "batches/batch.html#live", _detail_context(request, public_id))


def _manageable(request: HttpRequest, public_id: str) -> Batch:
    """The batch when the user may act on it; Http404 when they may not see it, and for a viewer (the policy
    refuses viewers before this)."""
    batch = get_object_or_404(visible(request.user), public_id=public_id)
    if not may_manage_key(request.user, batch.key):
        raise Http404("No such batch.")
    return batch


@require_POST
def batch_cancel(request: HttpRequest, public_id: str) -> HttpResponse:
    """Cancel a batch that is validating or in progress (console.batches.batches.cancel), audited."""
    batch = _manageable(request, public_id)
    before = batch.status
    if before not in CANCELLABLE:
        messages.error(request, f"{batch.public_id} is {before}: only a batch validating or in progress is cancelled.")
    else:
        with transaction.atomic():
            batch = batches.cancel(batch)
            record(None, "batch.cancel", batch, {"status": [before, batch.status], "key": batch.key.prefix})
        messages.success(request, f"{batch.public_id} {_cancel_words(batch.status)}.")
    target = request.POST.get("next")
    if target == "list":
        return redirect("batches:list")
    return redirect("batches:detail", batch.public_id)


def _cancel_words(status: str) -> str:
    if status == "cancelled":
        return "cancelled"
    return "is stopping: lines in flight end, then its finished lines are written to its files"


def batch_file(request: HttpRequest, public_id: str, which: str) -> StreamingHttpResponse:
    """The batch's output file (``which`` "output") or error file ("errors") as a JSONL download under its own
    name; 404 when it has none (yet)."""
    batch = _manageable(request, public_id)
    stored = batch.output_file if which == "output" else batch.error_file if which == "errors" else None
    if stored is None:
        raise Http404("This batch has no such file (yet).")
    response = StreamingHttpResponse(files.content(stored), content_type="application/jsonl")
    response["Content-Disposition"] = f'attachment; filename="{stored.filename}"'
    response["Content-Length"] = str(stored.bytes)
    return response
