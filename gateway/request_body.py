"""The client's request body: read whole within HEARTH_MAX_BODY_BYTES, and parsed as a JSON object whose
fields the gateway itself reads are checked (the engine checks the rest). Errors are GatewayError 400 or 413,
in the API's shape (gateway.errors)."""

import asyncio
import json
from typing import Any

from django.conf import settings

from gateway.asgi_io import Receive
from gateway.errors import GatewayError

# Fields the gateway itself reads or changes, checked before it does (the engine checks the rest).
FIELD_TYPES = (
    ("stream", bool, "true or false"),
    ("stream_options", dict, "an object"),
    ("max_tokens", int, "an integer"),
    ("max_completion_tokens", int, "an integer"),
)


def parse_body(body: bytes) -> dict[str, Any]:
    """The body as a JSON object. Raises GatewayError 400 for what is not one: invalid JSON or text, or JSON
    nested deeper than the parser's recursion limit (~1,000 levels in CPython)."""
    try:
        request = json.loads(body)
    except ValueError:
        raise GatewayError(400, "The request body is not valid JSON.") from None
    except RecursionError:
        raise GatewayError(400, "The request body is JSON nested too deeply.") from None
    if not isinstance(request, dict):
        raise GatewayError(400, "The request body must be a JSON object.")
    for name, kind, what in FIELD_TYPES:
        value = request.get(name)
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            raise GatewayError(400, f"'{name}' must be {what}.", param=name)
    return request


async def read_body(receive: Receive) -> bytes:
    """The whole body. Raises GatewayError 413 past HEARTH_MAX_BODY_BYTES, CancelledError when the client left."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise asyncio.CancelledError
        body += message.get("body", b"")
        if len(body) > settings.HEARTH_MAX_BODY_BYTES:
            raise GatewayError(
                413, f"The request body is over {settings.HEARTH_MAX_BODY_BYTES:,} bytes.", code="request_too_large"
            )
        if not message.get("more_body"):
            return bytes(body)
