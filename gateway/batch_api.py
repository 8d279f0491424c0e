"""OpenAI's Files and Batches API on /v1, for the same keys as the rest of it; each key sees only its own files and
batches (another's are 404, as unknown ones). Storage, checks and shapes are console.batches' (files, batches); the
runner is the worker's (console.batches.tasks, sent by name through console.batches.dispatch).

- ``POST /v1/files``: multipart/form-data (what the openai SDK sends) with ``file`` and ``purpose`` (``batch``), at
  most HEARTH_BATCH_FILE_MAX_BYTES (413 ``file_too_large`` past it); a file that is not a batch input answers 400
  naming its first bad line (console.batches.files), and nothing is stored;
- ``GET /v1/files`` (``purpose``, ``limit`` 1-10,000, default 10,000; ``after``: a file id), ``GET /v1/files/{id}``,
  ``GET /v1/files/{id}/content`` (bytes), ``DELETE /v1/files/{id}``;
- ``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window`` "24h", ``metadata``),
  ``GET /v1/batches`` (``limit`` 1-100, default 20; ``after``: a batch id), ``GET /v1/batches/{id}``,
  ``POST /v1/batches/{id}/cancel`` (400 ``batch_not_cancellable`` for one completed, failed or expired); a list
  ``after`` an id that is none of the key's is 400 ``invalid_value``.

Database work runs on its own small thread pool (WORKERS threads, so at most that many connections), off the loop.
A whole upload is held in memory while it is checked (at most the size limit, plus the form's few KiB).
"""

import io
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote_plus

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.files.uploadhandler import MemoryFileUploadHandler
from django.db import close_old_connections
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from kombu.exceptions import OperationalError

from console.batches import batches, dispatch, files
from console.batches.files import FileError
from console.batches.models import BatchFile
from gateway.asgi_io import Receive, Scope, Send, send_json
from gateway.errors import GatewayError
from gateway.registry import KeyEntry
from gateway.request_body import ClientLeft

log = logging.getLogger(__name__)
FILES, BATCHES = "/v1/files", "/v1/batches"
WORKERS = 2
FORM_OVERHEAD = 64 * 1024  # bytes of a multipart form beside the file's own
_pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="hearth-batch-api")


def is_endpoint(path: str) -> bool:
    """Whether ``path`` is one of this module's endpoints."""
    return any(path == base or path.startswith(base + "/") for base in (FILES, BATCHES))


async def _db[T](call: Callable[..., T], *args: Any) -> T:
    """``call(*args)`` on the database's thread pool. A FileError it raises is raised as the API's GatewayError."""

    def on_thread() -> T:
        close_old_connections()
        return call(*args)

    try:
        return await sync_to_async(on_thread, thread_sensitive=False, executor=_pool)()
    except FileError as exc:
        raise _refused(exc) from None


def _refused(exc: FileError) -> GatewayError:
    code = exc.code if exc.status != 404 else "not_found"
    return GatewayError(exc.status, exc.message, param=exc.param, code=code)


def _not_found(kind: str, public_id: str) -> GatewayError:
    return GatewayError(404, f"No such {kind}: {public_id!r}.", code="not_found")


async def answer(method: str, path: str, scope: Scope, receive: Receive, send: Send, key: KeyEntry) -> None:
    """Answer a Files or Batches request of ``key``. Raises GatewayError in OpenAI's shape (400, 404, 405, 413)."""
    parts = path.split("/")[2:]  # ["files"], ["files", id], ["files", id, "content"], ["batches", id, "cancel"]
    routes: dict[tuple[str, int, str], Callable[[], Any]] = {
        ("POST", 1, "files"): lambda: _upload(scope, receive, key),
        ("GET", 1, "files"): lambda: _file_list(scope, key),
        ("GET", 2, "files"): lambda: _file(key, parts[1]),
        ("DELETE", 2, "files"): lambda: _delete(key, parts[1]),
        ("POST", 1, "batches"): lambda: _create(receive, scope, key),
        ("GET", 1, "batches"): lambda: _batch_list(scope, key),
        ("GET", 2, "batches"): lambda: _batch(key, parts[1]),
    }
    if len(parts) == 3 and parts[2] in ("content", "cancel"):
        endpoint = ("GET", "files", "content") if parts[2] == "content" else ("POST", "batches", "cancel")
        if (parts[0], parts[2]) == endpoint[1:]:
            if method != endpoint[0]:
                raise _wrong_method(scope, endpoint[0])
            if parts[2] == "content":
                await _content(send, key, parts[1])
                return
            await send_json(send, 200, json.dumps(await _db(_cancel, key.id, parts[1])).encode())
            return
    handler = routes.get((method, len(parts), parts[0]))
    if handler is None:
        allowed = [m for (m, n, base) in routes if n == len(parts) and base == parts[0]]
        if allowed:
            raise _wrong_method(scope, ", ".join(allowed))
        raise GatewayError(404, f"Unknown endpoint {method} {scope['path']}.", code="unknown_url")
    await send_json(send, 200, json.dumps(await handler()).encode())


def _wrong_method(scope: Scope, allow: str) -> GatewayError:
    return GatewayError(
        405, f"{scope['path']} takes {allow}, not {scope['method']}.", code="method_not_allowed", allow=allow
    )


async def _read(receive: Receive, limit: int) -> bytes:
    """The request body, refused with 413 past ``limit`` bytes; ClientLeft when the client left before its end
    (never a file of what came)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientLeft
        body += message.get("body", b"")
        if len(body) > limit:
            raise _refused(files.too_large())
        if not message.get("more_body"):
            return bytes(body)


class _InMemory(MemoryFileUploadHandler):
    """Django's in-memory upload handler, whatever the upload's size (it steps aside past
    FILE_UPLOAD_MAX_MEMORY_SIZE): the body is in memory already, within the file size limit."""

    def handle_raw_input(self, *args: Any, **kwargs: Any) -> None:
        self.activated = True


def form(content_type: str, body: bytes) -> tuple[str, str, bytes]:
    """The upload's purpose, file name and file content from a multipart form. Raises FileError."""
    meta = {"CONTENT_TYPE": content_type, "CONTENT_LENGTH": str(len(body))}
    try:
        fields, uploads = MultiPartParser(meta, io.BytesIO(body), [_InMemory()], "utf-8").parse()
    except (MultiPartParserError, ValueError) as exc:
        raise FileError(f"The upload is not a multipart form: {exc}", "file", "invalid_file") from None
    upload = uploads.get("file")
    if upload is None:
        why = "The form needs a 'file' part (the JSONL file) and a 'purpose' ('batch')."
        raise FileError(why, "file", "missing_required_parameter")
    return str(fields.get("purpose", "")), upload.name or "", upload.read()


def _uploaded(key_id: int, content_type: str, body: bytes) -> dict[str, Any]:
    purpose, name, data = form(content_type, body)
    return batches.file_object(files.upload(key_id, name, purpose, data))


async def _upload(scope: Scope, receive: Receive, key: KeyEntry) -> dict[str, Any]:
    content_type = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
    if not content_type.startswith("multipart/form-data"):
        why = "Upload a file as multipart/form-data with 'file' and 'purpose'."
        raise GatewayError(400, why, param="file", code="invalid_file")
    body = await _read(receive, settings.HEARTH_BATCH_FILE_MAX_BYTES + FORM_OVERHEAD)
    return await _db(_uploaded, key.id, content_type, body)


def _query(scope: Scope) -> dict[str, str]:
    pairs = scope.get("query_string", b"").decode("latin-1").split("&")
    return {name: unquote_plus(value) for name, _, value in (p.partition("=") for p in pairs) if value}


def _limit(query: dict[str, str], default: int, most: int) -> int:
    limit = query.get("limit", str(default))
    if not limit.isdigit() or not 1 <= int(limit) <= most:
        raise GatewayError(400, f"'limit' must be from 1 to {most:,}.", param="limit", code="invalid_value")
    return int(limit)


def _files_of(key_id: int, purpose: str | None, after: str | None, limit: int) -> dict[str, Any]:
    """The key's files, newest first, of ``purpose`` when given, after the file ``after`` (OpenAI's cursor)."""
    found = BatchFile.objects.filter(key_id=key_id).order_by("-id")
    found = found.filter(purpose=purpose) if purpose else found
    cursor = found.filter(public_id=after).first() if after else None
    if after and cursor is None:
        raise batches.unknown_cursor("file", "files", after)
    page = list((found.filter(id__lt=cursor.id) if cursor else found)[: limit + 1])
    data = [batches.file_object(f) for f in page[:limit]]
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return {"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": len(page) > limit}


async def _file_list(scope: Scope, key: KeyEntry) -> dict[str, Any]:
    query = _query(scope)
    limit = _limit(query, 10000, 10000)
    return await _db(_files_of, key.id, query.get("purpose"), query.get("after"), limit)


async def _file(key: KeyEntry, public_id: str) -> dict[str, Any]:
    stored = await _db(files.owned, key.id, public_id)
    if stored is None:
        raise _not_found("file", public_id)
    return batches.file_object(stored)


def _deleted(key_id: int, public_id: str) -> bool:
    stored = files.owned(key_id, public_id)
    if stored is not None:
        stored.delete()
    return stored is not None


async def _delete(key: KeyEntry, public_id: str) -> dict[str, Any]:
    if not await _db(_deleted, key.id, public_id):
        raise _not_found("file", public_id)
    return {"id": public_id, "object": "file", "deleted": True}


async def _content(send: Send, key: KeyEntry, public_id: str) -> None:
    stored = await _db(files.owned, key.id, public_id)
    if stored is None:
        raise _not_found("file", public_id)
    pieces = await _db(files.chunk_ids, stored)
    headers = [(b"content-type", b"application/octet-stream"), (b"content-length", str(stored.bytes).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for pk in pieces:  # a chunk (1 MiB) in memory at a time
        await send({"type": "http.response.body", "body": await _db(files.chunk, pk), "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _create(receive: Receive, scope: Scope, key: KeyEntry) -> dict[str, Any]:
    body = await _read(receive, settings.HEARTH_MAX_BODY_BYTES)
    try:
        asked = json.loads(body)
    except ValueError:
        raise GatewayError(400, "The request body is not JSON.", code="invalid_json") from None
    if not isinstance(asked, dict):
        raise GatewayError(400, "The request body must be a JSON object.", code="invalid_json")
    args = (asked.get("input_file_id"), asked.get("endpoint"), asked.get("completion_window"), asked.get("metadata"))
    batch = await _db(batches.create, key.id, *args)
    try:
        await _db(dispatch.run, batch.pk)
    except OperationalError as exc:  # the broker is down: beat's sweep starts the batch once it is back
        log.warning("batch %s stored but its runner could not be sent yet: %s", batch.public_id, exc)
    return await _db(lambda: batches.batch_object(batches.owned(key.id, batch.public_id) or batch))


def _listed(key_id: int, after: str | None, limit: int) -> dict[str, Any]:
    page, more = batches.listed(key_id, after, limit)
    data = [batches.batch_object(b) for b in page]
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return {"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": more}


async def _batch_list(scope: Scope, key: KeyEntry) -> dict[str, Any]:
    query = _query(scope)
    limit = _limit(query, 20, 100)
    return await _db(_listed, key.id, query.get("after"), limit)


def _found(key_id: int, public_id: str) -> dict[str, Any] | None:
    batch = batches.owned(key_id, public_id)
    return batches.batch_object(batch) if batch is not None else None


async def _batch(key: KeyEntry, public_id: str) -> dict[str, Any]:
    found = await _db(_found, key.id, public_id)
    if found is None:
        raise _not_found("batch", public_id)
    return found


def _cancel(key_id: int, public_id: str) -> dict[str, Any]:
    batch = batches.owned(key_id, public_id)
    if batch is None:
        raise _not_found("batch", public_id)
    return batches.batch_object(batches.cancel(batch))
