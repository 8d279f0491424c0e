"""The ASGI shapes the gateway's modules share (scope, receive, send) and its one way to answer JSON."""

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]


async def send_json(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """A whole JSON answer: ``body`` already encoded, ``headers`` beside its content type."""
    all_headers = [(b"content-type", b"application/json"), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})
