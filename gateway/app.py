"""The /v1 gateway: a lean ASGI app (no Django request cycle, no DB query on the hot path).

Upstream client: aiohttp, chosen by benchmark (../shared/FACTS.md: at 64 streams an httpx relay kept
0.30–0.46 of direct throughput, aiohttp 0.98–1.00). Bytes are relayed as they arrive; a side copy is
watched so a stream the engine ends without its terminal event gets an in-stream error instead of a
clean-looking end. A client that goes away cancels the upstream request at once.
"""

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
from django.conf import settings

from gateway import errors
from gateway.errors import GatewayError, Surface
from gateway.registry import Registry, Route, Snapshot
from gateway.sse import StreamKind, StreamWatcher

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]

log = logging.getLogger(__name__)
SSE_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]

# POST endpoints relayed to the engine serving the body's model: path → (stream kind, error surface).
POST_ROUTES: dict[str, tuple[StreamKind, Surface]] = {
    "/v1/chat/completions": (StreamKind.CHAT, Surface.OPENAI),
    "/v1/completions": (StreamKind.CHAT, Surface.OPENAI),
    "/v1/embeddings": (StreamKind.CHAT, Surface.OPENAI),
    "/v1/responses": (StreamKind.RESPONSES, Surface.OPENAI),
    "/v1/messages": (StreamKind.MESSAGES, Surface.ANTHROPIC),
    "/v1/messages/count_tokens": (StreamKind.MESSAGES, Surface.ANTHROPIC),
}


class Gateway:
    def __init__(self) -> None:
        self.registry = Registry()
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=settings.HEARTH_STREAM_IDLE_TIMEOUT)
            self._session = aiohttp.ClientSession(
                timeout=timeout, connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
            )
        return self._session

    async def lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._session is not None:
                    await self._session.close()
                await self.registry.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"].rstrip("/")
        surface = Surface.ANTHROPIC if path.startswith("/v1/messages") else Surface.OPENAI
        try:
            await self._dispatch(scope, path, receive, send)
        except GatewayError as exc:
            await _send_json(send, exc.status, exc.body(surface))

    async def _dispatch(self, scope: Scope, path: str, receive: Receive, send: Send) -> None:
        method = scope["method"]
        snapshot = await self.registry.current()
        _authenticate(scope, snapshot)
        if method == "GET" and path == "/v1/models":
            await _send_json(send, 200, json.dumps({"object": "list", "data": _models(snapshot)}).encode())
        elif method == "GET" and path.startswith("/v1/models/"):
            name = path.removeprefix("/v1/models/")
            found = [m for m in _models(snapshot) if m["id"] == name]
            if not found:
                raise errors.unknown_model(name)
            await _send_json(send, 200, json.dumps(found[0]).encode())
        elif method == "POST" and path in POST_ROUTES:
            body = await _read_body(receive)
            route = _route(body, snapshot)
            await self._relay(route, path, body, receive, send)
        else:
            raise GatewayError(404, f"Unknown endpoint {method} {scope['path']}.", code="unknown_url")

    async def _relay(self, route: Route, path: str, body: bytes, receive: Receive, send: Send) -> None:
        relay = asyncio.ensure_future(self._forward(route, path, body, send))
        watcher = asyncio.ensure_future(_wait_disconnect(receive))
        done, _ = await asyncio.wait({relay, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if relay in done:
            watcher.cancel()
            relay.result()
        else:
            relay.cancel()
            log.info("client left; upstream request to %s aborted", route.served_model_name)

    async def _forward(self, route: Route, path: str, body: bytes, send: Send) -> None:
        headers = {"Authorization": f"Bearer {route.engine_api_key}", "Content-Type": "application/json"}
        started = time.monotonic()
        try:
            resp = await self.session.post(route.base_url + path, data=body, headers=headers)
        except (aiohttp.ClientError, TimeoutError):
            raise errors.upstream_unreachable(route.served_model_name) from None
        kind, surface = POST_ROUTES[path]
        async with resp:
            if resp.content_type != "text/event-stream":
                await _relay_whole(route, resp, surface, send)
                return
            await send(
                {
                    "type": "http.response.start",
                    "status": resp.status,
                    "headers": [(b"content-type", resp.headers["Content-Type"].encode()), *SSE_HEADERS],
                }
            )
            watcher = StreamWatcher(kind)
            try:
                async for chunk in resp.content.iter_any():
                    watcher.feed(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.warning("stream from %s broke: %s", route.served_model_name, exc)
            tail = b""
            if resp.status == 200 and not watcher.complete:
                tail = errors.stream_error_event(
                    "The engine ended the stream before it finished; the response is incomplete.",
                    "upstream_truncated",
                    surface,
                )
                log.warning(
                    "truncated stream from %s after %.1f s", route.served_model_name, time.monotonic() - started
                )
            await send({"type": "http.response.body", "body": tail, "more_body": False})


async def _relay_whole(route: Route, resp: aiohttp.ClientResponse, surface: Surface, send: Send) -> None:
    """A non-streaming answer is read whole before any byte goes out, so a body the engine cuts short
    becomes a 502 rather than a 200 with half a JSON document; engine errors get the API's own shape."""
    try:
        body = await resp.read()
    except (aiohttp.ClientError, TimeoutError):
        raise errors.upstream_broke(route.served_model_name) from None
    if resp.status >= 400:
        body = errors.reshape(resp.status, body, surface)
    content_type = resp.headers.get("Content-Type", "application/json").encode()
    await send({"type": "http.response.start", "status": resp.status, "headers": [(b"content-type", content_type)]})
    await send({"type": "http.response.body", "body": body})


def _authenticate(scope: Scope, snapshot: Snapshot) -> int:
    headers = dict(scope["headers"])
    key = headers.get(b"x-api-key", b"").decode("latin-1").strip()
    auth = headers.get(b"authorization", b"").decode("latin-1")
    if not key and auth[:7].lower() == "bearer ":
        key = auth[7:].strip()
    if not key:
        raise errors.missing_key()
    key_id = Registry.authenticate(snapshot, key)
    if key_id is None:
        raise errors.invalid_key()
    return key_id


def _route(body: bytes, snapshot: Snapshot) -> Route:
    try:
        request = json.loads(body)
    except ValueError:
        raise GatewayError(400, "The request body is not valid JSON.") from None
    model = request.get("model") if isinstance(request, dict) else None
    if not isinstance(model, str) or not model:
        raise GatewayError(400, "The request body needs a 'model' string.", param="model")
    route = snapshot.routes.get(model)
    if route is not None:
        return route
    if model in snapshot.states:
        raise errors.not_ready(model, snapshot.states[model])
    raise errors.unknown_model(model)


def _models(snapshot: Snapshot) -> list[dict[str, object]]:
    return [
        {"id": r.served_model_name, "object": "model", "created": r.created, "owned_by": "hearth",
         "max_model_len": r.max_model_len}
        for r in snapshot.routes.values()
    ]  # fmt: skip


async def _read_body(receive: Receive) -> bytes:
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


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send_json(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
