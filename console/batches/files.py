"""Files of the Files API: an uploaded batch input checked line by line before anything is stored, files stored
with their content in one transaction (row and chunks together or neither), read back a chunk at a time, deleted.

A batch input is JSONL: each non-blank line a JSON object ``{"custom_id": str (unique in the file), "method":
"POST", "url": one of ENDPOINTS, "body": {"model": str, ...}}``, at most HEARTH_MAX_BODY_BYTES (the gateway's
body limit, as the line's request would meet it), no ``"stream": true`` (a batch answers whole), at most MAX_LINES
lines; a leading UTF-8 byte order mark (Excel, PowerShell) is skipped. The first bad line is named in a FileError;
the file is then not stored at all.

Error codes: ``invalid_file`` for what is wrong with the file's content (param ``file``), or the line's own reason
(``duplicate_custom_id``, ``line_too_large``, ``too_many_lines``); ``invalid_value`` for a field's value (param: the
field); ``not_found`` (404); ``file_too_large`` (413).
"""

import hashlib
import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from console.batches.models import CHUNK_BYTES, BatchFile, BatchFileChunk, Purpose

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
MAX_LINES = 50_000  # requests in one batch input, OpenAI's limit


@dataclass(frozen=True)
class FileError(Exception):
    """Why a file or a batch was refused, in OpenAI's error fields (status: the HTTP status to answer)."""

    message: str
    param: str | None = "file"
    code: str | None = "invalid_file"
    status: int = 400
    line: int | None = None  # the input line at fault, from 1


def _line_error(number: int, why: str, code: str = "invalid_file") -> FileError:
    return FileError(f"Line {number} of the file {why}", param="file", code=code, line=number)


def checked_lines(data: bytes) -> list[dict[str, Any]]:
    """The requests of a batch input ``data`` (module docstring), blank lines skipped. Raises FileError naming the
    first bad line (numbered from 1, as an editor shows it)."""
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise FileError(f"The file is not UTF-8 text (byte {exc.start}); a batch input is JSONL.") from None
    lines: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        if len(raw.encode()) > settings.HEARTH_MAX_BODY_BYTES:
            raise _line_error(
                number, f"is over the body limit ({settings.HEARTH_MAX_BODY_BYTES:,} bytes).", "line_too_large"
            )
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _line_error(number, f"is not JSON ({exc.msg}); a batch input is JSONL, one object a line.") from None
        lines.append(_checked(number, line, seen))
        if len(lines) > MAX_LINES:
            raise _line_error(number, f"is past the limit of {MAX_LINES:,} requests in a batch.", "too_many_lines")
    if not lines:
        raise FileError("The file has no request: a batch input is JSONL, one request object a line.")
    return lines


def _checked(number: int, line: Any, seen: set[str]) -> dict[str, Any]:
    """``line`` when it is one request (module docstring), its custom_id noted in ``seen``; raises FileError."""
    if not isinstance(line, dict):
        raise _line_error(number, "is not a JSON object.")
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > 512:
        raise _line_error(number, "needs a 'custom_id' string of 1 to 512 characters.")
    if custom_id in seen:
        raise _line_error(number, f"repeats custom_id {custom_id!r}: each must be unique.", "duplicate_custom_id")
    seen.add(custom_id)
    if line.get("method") != "POST":
        raise _line_error(number, "needs 'method': 'POST'.")
    if line.get("url") not in ENDPOINTS:
        raise _line_error(number, f"has url {line.get('url')!r}; a batch runs {', '.join(ENDPOINTS)}.")
    body = line.get("body")
    if not isinstance(body, dict) or not isinstance(body.get("model"), str) or not body["model"]:
        raise _line_error(number, "needs a 'body' object naming its 'model'.")
    if body.get("stream") is True:
        raise _line_error(number, "asks for a stream; a batch line is answered whole (leave 'stream' out).")
    return line


@transaction.atomic
def store(key_id: int, filename: str, purpose: str, data: bytes, lines: int) -> BatchFile:
    """A new file of ``key_id`` holding ``data`` (``lines`` JSONL lines), its row and content in one transaction."""
    stored = BatchFile.objects.create(
        key_id=key_id,
        filename=filename[:255],
        purpose=purpose,
        bytes=len(data),
        lines=lines,
        sha256=hashlib.sha256(data).hexdigest(),
    )
    BatchFileChunk.objects.bulk_create(
        BatchFileChunk(file=stored, index=i, data=data[start : start + CHUNK_BYTES])
        for i, start in enumerate(range(0, len(data), CHUNK_BYTES))
    )
    return stored


@transaction.atomic
def store_lines(key_id: int, filename: str, purpose: str, *parts: Iterable[bytes]) -> BatchFile:
    """A new file of ``key_id`` holding the JSONL lines of ``parts`` in turn (each ending in a newline), written a
    chunk at a time (memory holds one chunk), its row and content in one transaction."""
    stored = BatchFile.objects.create(key_id=key_id, filename=filename, purpose=purpose, bytes=0, sha256="")
    digest, buffer, index = hashlib.sha256(), bytearray(), 0
    for line in itertools.chain(*parts):
        buffer += line
        stored.bytes, stored.lines = stored.bytes + len(line), stored.lines + 1
        digest.update(line)
        while len(buffer) >= CHUNK_BYTES:
            BatchFileChunk.objects.create(file=stored, index=index, data=bytes(buffer[:CHUNK_BYTES]))
            del buffer[:CHUNK_BYTES]
            index += 1
    if buffer:
        BatchFileChunk.objects.create(file=stored, index=index, data=bytes(buffer))
    stored.sha256 = digest.hexdigest()
    stored.save(update_fields=["bytes", "lines", "sha256"])
    return stored


def upload(key_id: int, filename: str, purpose: str, data: bytes) -> BatchFile:
    """An uploaded file stored once checked: ``purpose`` must be ``batch`` and ``data`` a batch input (at most
    HEARTH_BATCH_FILE_MAX_BYTES). Raises FileError (nothing stored)."""
    if purpose != Purpose.BATCH:
        raise FileError(
            f"Purpose {purpose!r} is not served here; upload batch inputs with purpose 'batch'.",
            "purpose",
            "invalid_value",
        )
    if len(data) > settings.HEARTH_BATCH_FILE_MAX_BYTES:
        raise too_large()
    return store(key_id, filename or "upload.jsonl", purpose, data, len(checked_lines(data)))


def too_large() -> FileError:
    return FileError(
        f"The file is over the limit of {settings.HEARTH_BATCH_FILE_MAX_BYTES:,} bytes (HEARTH_BATCH_FILE_MAX_BYTES).",
        "file",
        "file_too_large",
        413,
    )


def owned(key_id: int, public_id: str) -> BatchFile | None:
    """The file ``public_id`` when ``key_id`` owns it, else None (another key's file is as unknown as none)."""
    return BatchFile.objects.filter(key_id=key_id, public_id=public_id).first()


def chunk_ids(stored: BatchFile) -> list[int]:
    """The ids of the file's chunks, in order."""
    return list(stored.chunks.order_by("index").values_list("id", flat=True))


def chunk(pk: int) -> bytes:
    """One chunk's bytes."""
    return bytes(BatchFileChunk.objects.values_list("data", flat=True).get(pk=pk))


def content(stored: BatchFile) -> Iterator[bytes]:
    """The file's bytes, a chunk at a time (each read on its own query: memory holds one chunk)."""
    for pk in chunk_ids(stored):
        yield chunk(pk)


def whole(stored: BatchFile) -> bytes:
    """The file's bytes at once."""
    return b"".join(content(stored))
