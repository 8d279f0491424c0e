"""The lines of a batch's output and error files, in OpenAI's shape (``{"id", "custom_id", "response", "error"}``),
as the batch runner (console.batches.runner) makes them: from the gateway's answer to a line, from an answer the
gateway kept for a line whose runner went away (gateway.batch_lines), and for a line a cancel or an expiry left
without an answer.

OpenAI's Batch guide (platform.openai.com/docs/guides/batch) is the source: an expired batch's unfinished requests
are in its error file, each ``{"code": "batch_expired", "message": ...}`` with ``response`` null.
"""

import json
from dataclasses import dataclass
from typing import Any

from console.batches.credential import LineCredential

STOP_GRACE = 60.0  # seconds a cancelled or expired batch waits for its lines in flight


@dataclass(frozen=True, slots=True)
class Line:
    """A pending line as the runner sends it (its body is read from the database when it is sent)."""

    pk: int
    credential: LineCredential
    custom_id: str
    url: str
    model: str


def answer_line(line: Line, status: int, request_id: str, body: Any) -> tuple[bool, dict[str, Any]]:
    """Whether the line succeeded, and its output- or error-file line in OpenAI's shape."""
    ok = 200 <= status < 300
    error = None
    if not ok:
        found = body.get("error") if isinstance(body, dict) else None
        detail: dict[str, Any] = found if isinstance(found, dict) else {}
        code = detail.get("code") or detail.get("type") or f"http_{status}"
        error = {"code": code, "message": detail.get("message") or f"The request was answered with HTTP {status}."}
    response = {"status_code": status, "request_id": request_id, "body": body}
    return ok, {"id": line.credential.request_id, "custom_id": line.custom_id, "response": response, "error": error}


def kept_answer(line: Line, stored: bytes | str) -> tuple[bool, dict[str, Any]]:
    """The output- or error-file line from an answer the gateway kept (gateway.batch_lines' JSON)."""
    kept = json.loads(stored)
    raw = kept["body"].encode("latin-1")
    try:
        body: Any = json.loads(raw)
    except ValueError:
        body = raw.decode("utf-8", "replace")
    headers = {k.lower(): v for k, v in kept["headers"]}
    return answer_line(line, kept["status"], headers.get("x-request-id", line.credential.request_id), body)


def cancelled_in_flight(line: Line) -> dict[str, Any]:
    """The error-file line of a line still in flight STOP_GRACE seconds after its batch was cancelled."""
    why = f"cancelled while in flight: no answer within {STOP_GRACE:.0f} s of the cancel"
    return _unanswered(line, "batch_cancelled", why)


def expired(line: Line, in_flight: bool) -> dict[str, Any]:
    """The error-file line of a line its batch's completion window ended before: never sent, or (``in_flight``)
    sent and still without an answer STOP_GRACE seconds after the window's end."""
    why = "This request could not be executed before the completion window expired."
    if in_flight:
        why += f" It was in flight and had no answer within {STOP_GRACE:.0f} s of the window's end."
    return _unanswered(line, "batch_expired", why)


def _unanswered(line: Line, code: str, message: str) -> dict[str, Any]:
    error = {"code": code, "message": message}
    return {"id": line.credential.request_id, "custom_id": line.custom_id, "response": None, "error": error}
