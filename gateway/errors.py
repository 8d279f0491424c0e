"""Error bodies in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Types and codes follow the OpenAI API reference ("Error codes"): 401 invalid_api_key, 404
model_not_found, 400 invalid_request_error, 413, 503 and 502 as server errors.
"""

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class GatewayError(Exception):
    """An error answered before any byte of a response was sent."""

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None

    def body(self) -> bytes:
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


def not_ready(name: str, state: str) -> GatewayError:
    return GatewayError(
        503,
        f"The model '{name}' has no ready replica (its deployment is {state}).",
        type="server_error",
        code="no_ready_replica",
    )


def upstream_unreachable(name: str) -> GatewayError:
    return GatewayError(
        502, f"The engine serving '{name}' did not answer.", type="server_error", code="upstream_unreachable"
    )


def stream_error_event(message: str, code: str) -> bytes:
    """An in-stream SSE error event, sent when a stream cannot end cleanly; no ``[DONE]`` follows it."""
    payload = {"error": {"message": message, "type": "server_error", "param": None, "code": code}}
    return f"data: {json.dumps(payload)}\n\n".encode()
