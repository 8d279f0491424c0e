"""A batch's life: created from a stored input file (its lines copied in the same transaction), its lines' answers
recorded once each, cancelled, and ended with its output and error files written from the lines answered so far.
The runner (console.batches.runner) drives it; the gateway (gateway.batch_api) creates, reads and cancels.
"""

import json
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from console.batches import files
from console.batches.files import FileError
from console.batches.models import ENDED, Batch, BatchFile, BatchLine, LineState, Purpose, Status

WINDOWS = {"24h": timedelta(hours=24)}  # the completion windows accepted, as OpenAI's
MAX_METADATA = 16  # key-value pairs, OpenAI's limit
USAGE = ("input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens")  # Batch's usage fields


def _metadata(metadata: Any) -> dict[str, str]:
    if metadata is None:
        return {}
    ok = isinstance(metadata, dict) and len(metadata) <= MAX_METADATA
    if not ok or not all(isinstance(k, str) and isinstance(v, str) and len(k) <= 64 for k, v in metadata.items()):
        raise FileError(
            "'metadata' is up to 16 pairs of strings (keys up to 64 characters).", "metadata", "invalid_value"
        )
    return dict(metadata)


def create(key_id: int, input_file_id: str, endpoint: str, window: str, metadata: Any) -> Batch:
    """A new batch of ``key_id`` over its file ``input_file_id``, every line of which must go to ``endpoint``;
    status validating until the runner starts it. Raises FileError (400, also for a missing ``input_file_id`` or
    one not a string; 404 for a file the key does not own)."""
    if endpoint not in files.ENDPOINTS:
        why = f"Endpoint {endpoint!r} cannot be batched: one of {', '.join(files.ENDPOINTS)}."
        raise FileError(why, "endpoint", "invalid_value")
    if window not in WINDOWS:
        raise FileError("'completion_window' must be '24h'.", "completion_window", "invalid_value")
    extra = _metadata(metadata)
    if not isinstance(input_file_id, str) or not input_file_id:
        why = "Missing required parameter: 'input_file_id' (the id of a file uploaded with purpose 'batch')."
        raise FileError(why, "input_file_id", "missing_required_parameter")
    source = files.owned(key_id, input_file_id)
    if source is None:
        raise FileError(f"No such file: {input_file_id!r}.", "input_file_id", "not_found", 404)
    if source.purpose != Purpose.BATCH:
        why = f"File {input_file_id} has purpose {source.purpose!r}, not 'batch'."
        raise FileError(why, "input_file_id", "invalid_value")
    lines = files.checked_lines(files.whole(source))
    for line in lines:  # named by its custom_id: its upload's errors number lines as an editor does, blanks too
        if line["url"] != endpoint:
            why = f"The request {line['custom_id']!r} in the file goes to {line['url']}, not the batch's {endpoint}."
            raise FileError(why, "endpoint", "invalid_value")
    with transaction.atomic():
        now = timezone.now()
        batch = Batch.objects.create(
            key_id=key_id,
            endpoint=endpoint,
            instance=settings.HEARTH_INSTANCE,
            input_file_id=source.public_id,
            completion_window=window,
            metadata=extra,
            model=one_model(x["body"] for x in lines),
            total=len(lines),
            created_at=now,
            expires_at=now + WINDOWS[window],
        )
        BatchLine.objects.bulk_create(
            (BatchLine(batch=batch, index=i, custom_id=x["custom_id"], url=x["url"], body=x["body"]))
            for i, x in enumerate(lines)
        )
    return batch


def one_model(bodies: Iterable[Any]) -> str:
    """The model every one of the lines' ``bodies`` names (Batch.model); "" when they name several, or not one."""
    named = {body.get("model") if isinstance(body, dict) else None for body in bodies}
    found = named.pop() if len(named) == 1 else None
    return found if isinstance(found, str) else ""


def owned(key_id: int, public_id: str) -> Batch | None:
    """The batch ``public_id`` when ``key_id`` owns it, else None."""
    return Batch.objects.select_related("output_file", "error_file").filter(key_id=key_id, public_id=public_id).first()


def listed(key_id: int, after: str | None, limit: int) -> tuple[list[Batch], bool]:
    """Up to ``limit`` batches of ``key_id``, newest first, after the batch ``after`` (OpenAI's cursor); and whether
    more follow. Raises FileError (400 ``invalid_value``, param ``after``) when ``after`` is none of the key's."""
    query = Batch.objects.select_related("output_file", "error_file").filter(key_id=key_id)
    if after:
        cursor = query.filter(public_id=after).first()
        if cursor is None:
            raise unknown_cursor("batch", "batches", after)
        query = query.filter(id__lt=cursor.id)
    page = list(query.order_by("-id")[: limit + 1])
    return page[:limit], len(page) > limit


def unknown_cursor(kind: str, kinds: str, after: str) -> FileError:
    """The refusal of a list ``after`` an id the key has no such object of (``kind``, plural ``kinds``)."""
    return FileError(
        f"No {kind} {after!r} to list after: 'after' takes the id of one of your {kinds}.", "after", "invalid_value"
    )


def enter(batch_pk: int, status: Status, *, from_statuses: tuple[str, ...]) -> bool:
    """Move the batch to ``status`` (its ``…_at`` time set now) when it is in one of ``from_statuses``; whether it
    moved."""
    fields = {"status": status, f"{status.value}_at": timezone.now()}
    return Batch.objects.filter(pk=batch_pk, status__in=from_statuses).update(**fields) == 1


def cancel(batch: Batch) -> Batch:
    """Ask the batch to stop: cancelling (the runner sends no new line, waits for those in flight and writes what
    finished), or cancelled at once when it had not started; one cancelling or cancelled already is returned as it
    is. Raises FileError (400 ``batch_not_cancellable``: not 409, which OpenAI's SDKs retry) for one completed, failed
    or expired."""
    if batch.status in (Status.COMPLETED, Status.FAILED, Status.EXPIRED):
        why = f"Batch {batch.public_id} is {batch.status}; only a validating or in_progress batch can be cancelled."
        raise FileError(why, None, "batch_not_cancellable", 400)
    if not enter(batch.pk, Status.CANCELLING, from_statuses=(Status.IN_PROGRESS, Status.FINALIZING)):
        if enter(batch.pk, Status.CANCELLING, from_statuses=(Status.VALIDATING,)):
            finish(batch.pk, Status.CANCELLED)
    batch.refresh_from_db()
    return batch


def record(line_pk: int, batch_pk: int, ok: bool, answer: dict[str, Any]) -> bool:
    """A line's answer stored, and the batch's request_counts raised, in one transaction, when the line was still
    pending (a line is answered once: whether this call stored it)."""
    state = LineState.DONE if ok else LineState.FAILED
    with transaction.atomic():
        stored = BatchLine.objects.filter(pk=line_pk, state=LineState.PENDING).update(
            state=state, answer=answer, answered_at=timezone.now()
        )
        if stored:
            counter = "completed" if ok else "failed"
            usage = {name: F(name) + n for name, n in zip(USAGE, usage_of(answer), strict=True) if n}
            Batch.objects.filter(pk=batch_pk).update(**{counter: F(counter) + 1}, **usage)
    return bool(stored)


def usage_of(answer: dict[str, Any]) -> tuple[int, int, int, int]:
    """The tokens of an output- or error-file line's answer, in USAGE's order (input, cached, output, reasoning);
    0 for each its body's ``usage`` does not give. Chat and completions name them ``prompt_tokens``,
    ``completion_tokens`` and their ``…_details``; the Responses API ``input_tokens``, ``output_tokens`` and theirs;
    embeddings give ``prompt_tokens`` alone."""
    response = answer.get("response")
    body = response.get("body") if isinstance(response, dict) else None
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0, 0, 0, 0

    def tokens(name: str, details: str = "") -> int:
        within = usage.get(details) if details else usage
        found = within.get(name) if isinstance(within, dict) else None
        return found if isinstance(found, int) and not isinstance(found, bool) and found > 0 else 0

    return (
        tokens("prompt_tokens") or tokens("input_tokens"),
        tokens("cached_tokens", "prompt_tokens_details") or tokens("cached_tokens", "input_tokens_details"),
        tokens("completion_tokens") or tokens("output_tokens"),
        tokens("reasoning_tokens", "completion_tokens_details") or tokens("reasoning_tokens", "output_tokens_details"),
    )


def record_failed(batch_pk: int, answers: dict[int, dict[str, Any]]) -> int:
    """Error-file lines (line pk → its line) stored for the lines still pending, and the batch's failed count
    raised by as many, in one transaction: how many were stored."""
    with transaction.atomic():
        stored = sum(
            BatchLine.objects.filter(pk=pk, state=LineState.PENDING).update(
                state=LineState.FAILED, answer=answer, answered_at=timezone.now()
            )
            for pk, answer in answers.items()
        )
        if stored:
            Batch.objects.filter(pk=batch_pk).update(failed=F("failed") + stored)
    return stored


def _answers(batch: Batch, state: LineState) -> Iterator[bytes]:
    for answer in batch.lines.filter(state=state).order_by("index").values_list("answer", flat=True).iterator():
        yield json.dumps(answer, separators=(",", ":")).encode() + b"\n"


def _write(batch: Batch, state: LineState, name: str) -> BatchFile | None:
    """The file of the batch's lines in ``state`` (None when there is none), written a chunk at a time."""
    lines = _answers(batch, state)
    first = next(lines, None)
    if first is None:
        return None
    return files.store_lines(batch.key_id, f"{batch.public_id}_{name}.jsonl", Purpose.BATCH_OUTPUT, [first], lines)


def finish(batch_pk: int, status: Status) -> None:
    """End the batch in ``status`` (completed, expired or cancelled), its output and error files written from the
    lines answered, in one transaction; a batch already ended is left as it is."""
    with transaction.atomic():
        batch = Batch.objects.select_for_update().get(pk=batch_pk)
        if batch.status in ENDED:
            return
        batch.output_file = _write(batch, LineState.DONE, "output")
        batch.error_file = _write(batch, LineState.FAILED, "error")
        batch.status, batch.waiting_reason = status, ""
        setattr(batch, f"{status.value}_at", timezone.now())
        batch.save()


def unix(at: datetime | None) -> int | None:
    return int(at.timestamp()) if at is not None else None


def file_object(stored: BatchFile) -> dict[str, Any]:
    """OpenAI's file object."""
    return {
        "id": stored.public_id,
        "object": "file",
        "bytes": stored.bytes,
        "created_at": unix(stored.created_at),
        "expires_at": None,
        "filename": stored.filename,
        "purpose": stored.purpose,
        "status": "processed",
        "status_details": None,
    }


def batch_object(batch: Batch) -> dict[str, Any]:
    """OpenAI's batch object, with Hearth's ``waiting_reason``: what the batch's unsent lines wait for ("deployment
    <name> is <state>"), None when nothing holds them (the SDKs keep fields they do not know)."""
    times = "created_at in_progress_at expires_at finalizing_at completed_at failed_at expired_at cancelling_at"
    times += " cancelled_at"
    return {
        "id": batch.public_id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": batch.errors,
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": batch.status,
        "output_file_id": batch.output_file.public_id if batch.output_file else None,
        "error_file_id": batch.error_file.public_id if batch.error_file else None,
        **{name: unix(getattr(batch, name)) for name in times.split()},
        "request_counts": {"total": batch.total, "completed": batch.completed, "failed": batch.failed},
        "metadata": batch.metadata or None,
        "model": batch.model or None,
        "waiting_reason": batch.waiting_reason or None,
        "usage": {
            "input_tokens": batch.input_tokens,
            "input_tokens_details": {"cached_tokens": batch.cached_tokens},
            "output_tokens": batch.output_tokens,
            "output_tokens_details": {"reasoning_tokens": batch.reasoning_tokens},
            "total_tokens": batch.input_tokens + batch.output_tokens,
        },
    }
