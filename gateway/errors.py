"""Errors in each API's own shape.

- OpenAI: ``{"error": {"message", "type", "param", "code"}}`` (OpenAI API reference, "Error codes":
  401 invalid_api_key, 404 model_not_found, 400 invalid_request_error, 5xx server errors);
- Anthropic: ``{"type": "error", "error": {"type", "message"}}`` with the type named by status (Anthropic
  API reference, "Errors": 400 invalid_request_error, 401 authentication_error, 403 permission_error,
  404 not_found_error, 413 request_too_large, 429 rate_limit_error, 500 api_error, 529 overloaded_error).
"""

import json
from dataclasses import dataclass
from enum import StrEnum


class Surface(StrEnum):
    OPENAI = "openai"
    ANTHROPIC = "anthropic"


ANTHROPIC_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error", 504: "timeout_error",
}  # fmt: skip


@dataclass(frozen=True)
class GatewayError(Exception):
    """An error answered before any byte of a response was sent."""

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    retry_after: int | None = None  # seconds, sent as the Retry-After header

    def body(self, surface: Surface = Surface.OPENAI) -> bytes:
        if surface == Surface.ANTHROPIC:
            kind = ANTHROPIC_TYPES.get(self.status, "api_error")
            return json.dumps({"type": "error", "error": {"type": kind, "message": self.message}}).encode()
        return json.dumps(
            {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        ).encode()


def missing_key() -> GatewayError:
    return GatewayError(
        401, "No API key given. Send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'.", code="missing_api_key"
    )


def invalid_key() -> GatewayError:
    return GatewayError(401, "Incorrect API key provided.", code="invalid_api_key")


def unknown_model(name: str) -> GatewayError:
    return GatewayError(
        404,
        f"The model '{name}' does not exist or you do not have access to it.",
        code="model_not_found",
        param="model",
    )


def model_not_allowed(name: str) -> GatewayError:
    return GatewayError(403, f"This API key may not use the model '{name}'.", code="model_not_allowed", param="model")


def upstream_timeout(name: str) -> GatewayError:
    return GatewayError(
        504, f"The engine serving '{name}' went silent for longer than HEARTH_STREAM_IDLE_TIMEOUT.",
        type="server_error", code="upstream_timeout",
    )  # fmt: skip


def not_ready(name: str, state: str) -> GatewayError:
    return GatewayError(
        503,
        f"The model '{name}' has no ready replica (its deployment is {state}).",
        type="server_error",
        code="no_ready_replica",
    )


def engine_refused(name: str) -> GatewayError:
    return GatewayError(502, f"The engine serving '{name}' refused the gateway's credentials; relaunch the "
                        "deployment.", type="server_error", code="engine_refused")  # fmt: skip


def upstream_unreachable(name: str) -> GatewayError:
    return GatewayError(502, f"No replica serving '{name}' could be reached, or each closed the connection "
                        "without an answer.", type="server_error", code="upstream_unreachable")  # fmt: skip


def upstream_broke(name: str) -> GatewayError:
    return GatewayError(
        502, f"The engine serving '{name}' broke off its answer.", type="server_error", code="upstream_truncated"
    )


def reshape(status: int, body: bytes, surface: Surface) -> bytes:
    """An engine's error body in the API's own shape, keeping its message (vLLM's carries the real
    numbers of a context-length error) and its status."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        message, param = str(error["message"]), error.get("param")
    elif isinstance(data, dict) and (error or data.get("detail") or data.get("message")):
        message, param = str(error or data.get("detail") or data.get("message")), None  # FastAPI's {"detail": ...}
    else:
        message, param = body.decode("utf-8", "replace")[:2000] or f"The engine answered HTTP {status}.", None
    if status == 404 and message == "Not Found":
        message = "The engine serving this model does not offer this endpoint."
    kind = "invalid_request_error" if status < 500 else "server_error"
    return GatewayError(status, message, type=kind, param=param).body(surface)


def stream_error_event(message: str, code: str, surface: Surface = Surface.OPENAI) -> bytes:
    """An in-stream SSE error event, sent when a stream cannot end cleanly; no terminal event follows it.

    Anthropic's documented form is ``event: error`` with an error body; OpenAI's streams carry
    ``data: {"error": ...}``, which the openai SDK raises as an APIError.
    """
    if surface == Surface.ANTHROPIC:
        payload = {"type": "error", "error": {"type": "api_error", "message": message}}
        return f"event: error\ndata: {json.dumps(payload)}\n\n".encode()
    error = {"error": {"message": message, "type": "server_error", "param": None, "code": code}}
    return f"data: {json.dumps(error)}\n\n".encode()
