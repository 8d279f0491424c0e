"""The in-stream error events that end a stream that cannot end cleanly, in each API's shape: why it was cut
(``StreamCut``, its code), the words for it, and the event (an OpenAI chat stream's ``data: {"error": ...}``, a
Responses stream's ``response.failed``, Anthropic's ``event: error``); and a whole error (gateway.errors) as such an
event, for a stream whose head went out before it could be answered."""

import json
from enum import StrEnum

from gateway.engine_messages import clean
from gateway.errors import GatewayError, Surface


class StreamCut(StrEnum):
    """Why a stream ended without its terminal event: the code its in-stream error carries."""

    CLOSED = "upstream_truncated"  # the engine closed the stream (or died)
    IDLE = "upstream_timeout"  # the engine sent nothing for HEARTH_STREAM_IDLE_TIMEOUT seconds
    ENGINE_ERROR = "engine_error"  # the engine sent its own error event (its text is passed on)
    RESTART = "gateway_restarting"  # the web process stopped before the stream ended (HEARTH_DRAIN_SECONDS)


def stream_cut_message(cut: StreamCut, idle_seconds: float, engine_error: str | None = None) -> str:
    if cut == StreamCut.IDLE:
        return (
            f"The engine sent nothing for {idle_seconds:.0f} s (HEARTH_STREAM_IDLE_TIMEOUT); "
            "the response is incomplete."
        )
    if cut == StreamCut.ENGINE_ERROR and engine_error:
        return f"The engine failed: {clean(engine_error, 'An engine error in a translated stream')}"
    if cut == StreamCut.RESTART:
        return (
            "Hearth's web process stopped (a restart or make down) before the stream finished; the response is "
            "incomplete: retry."
        )
    return "The engine ended the stream before it finished; the response is incomplete."


def stream_error_event(
    message: str, code: str, surface: Surface = Surface.OPENAI, *, response_id: str | None = None
) -> bytes:
    """An in-stream SSE error event, sent when a stream cannot end cleanly; no terminal event of the engine's
    follows it.

    Anthropic's documented form is ``event: error`` with an error body (type ``timeout_error`` for an idle
    stall, ``api_error`` otherwise); OpenAI chat streams carry ``data: {"error": ...}``, which the openai SDK
    raises as an APIError. A Responses stream (``response_id`` given, "" when none was seen) ends with
    ``response.failed``, its response ``status: "failed"`` with ``error: {code, message}``
    (https://platform.openai.com/docs/api-reference/responses-streaming/response/failed).
    """
    if surface == Surface.ANTHROPIC:
        kind = "timeout_error" if code == StreamCut.IDLE else "api_error"
        payload = {"type": "error", "error": {"type": kind, "message": message}}
        return f"event: error\ndata: {json.dumps(payload)}\n\n".encode()
    if response_id is not None:
        response: dict[str, object] = {
            "id": response_id,
            "object": "response",
            "status": "failed",
            "output": [],
            "error": {"code": code, "message": message},
            "incomplete_details": None,
        }
        event = {"type": "response.failed", "sequence_number": 0, "response": response}
        return f"event: response.failed\ndata: {json.dumps(event)}\n\n".encode()
    error = {"error": {"message": message, "type": "server_error", "param": None, "code": code}}
    return f"data: {json.dumps(error)}\n\n".encode()


def error_event(error: GatewayError, surface: Surface, responses: bool) -> bytes:
    """``error`` as the in-stream event that ends a stream whose head went out before it could be answered (a
    request held for a wake, gateway.holding): Anthropic's ``event: error`` with the type its status has, a
    Responses stream's ``response.failed`` (``responses``), a chat stream's ``data: {"error": ...}``."""
    if surface == Surface.ANTHROPIC:
        return b"event: error\ndata: " + error.body(surface) + b"\n\n"
    code = error.code or error.type
    return stream_error_event(error.message, code, surface, response_id="" if responses else None)


def gateway_restarting() -> GatewayError:
    """A request still held (for a wake or in a lane) when the web process stopped: a 503 before its head went out,
    the in-stream error event after (gateway.app)."""
    message = stream_cut_message(StreamCut.RESTART, 0)
    return GatewayError(503, message, type="server_error", code=StreamCut.RESTART.value, retry_after=1)
