"""The relay processes' way to the console: every request that is not the gateway's is passed, as it came,
to the console process over its unix socket, and its answer back as it comes.

Why (issue 17, measured with bench/gateway_overhead.py --dashboard): a console page is built in Python
while holding the GIL (~40–70 ms of CPU per page on a 2-core AVX2 machine), and in a process that also
relays streams the event loop waits for it, adding 9–24 ms to the TTFT p50 of 64 streams while one user's
dashboard refreshes every second. Served by its own process (appliance.console_asgi, started by
appliance.web_server), a page costs the relay process a forward: one request written and an answer read
(aiohttp's client over a UnixConnector; the console's traffic is a few requests a second, so a library's
client, not the gateway's own).

What is forwarded: method, path and query as received, every header but the hop-by-hop ones (RFC 9110
§7.6.1) and ``x-hearth-peer``, which is set here to this connection's client, scheme and server
(appliance.console_peer), header values as UTF-8 where they are (aiohttp sends text as UTF-8; other bytes
pass as Latin-1 characters); the body is read whole first, as nginx buffers it, so a slow or vanishing
uploader never holds a connection to the console (bodies over HEARTH_MAX_BODY_BYTES get 413, as /v1's do),
and sent with its length. A request target that is not a path (``*``) gets 400. Not followed or kept: redirects
(the browser's to follow), cookies (a DummyCookieJar: the session is shared by every user), compression
(bytes pass as they are). An answer's head is sent only once the console gave it; if the console cannot be
reached the client gets 503 with Retry-After (JSON ``{"detail": ...}`` under /api/, as console.api
answers, elsewhere a page that reloads itself); an answer cut after its head ends the client's connection
without the chunked terminator, so it never looks complete.

Imports nothing of Hearth's but appliance.console_peer (and Django's settings).
"""

import json
import logging

import aiohttp
from django.conf import settings
from yarl import URL

from appliance.console_peer import PEER_HEADER, Receive, Scope, Send, peer_header

log = logging.getLogger(__name__)
HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
}
CONNECT_TIMEOUT = 5.0  # seconds to reach the console's socket; a page itself may take as long as it takes
RETRY_AFTER = b"2"  # seconds: about a console process's start
Headers = tuple[tuple[bytes, bytes], ...]


class ClientGone(Exception):
    """The client left before its request's body was whole: nothing is forwarded."""


class BodyTooLarge(Exception):
    """The request's body is over HEARTH_MAX_BODY_BYTES."""


class ConsoleProxy:
    """An ASGI app forwarding http requests to the console process listening on ``socket_path``."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:  # made on the event loop that uses it, at the first request
            self._session = aiohttp.ClientSession(
                # no limit on connections: each is held only while the console answers a whole request
                connector=aiohttp.UnixConnector(path=self.socket_path, limit=0, keepalive_timeout=4),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the console serves no websocket
            return
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        if not raw_path.startswith("/"):
            await _answer(send, 400, b"text/plain; charset=utf-8", b"The request target must be a path.\n")
            return
        try:
            body = await _body(receive)
        except ClientGone:
            return
        except BodyTooLarge:
            detail = f"The request body is over {settings.HEARTH_MAX_BODY_BYTES} bytes."
            await _answer(send, 413, *_detail(scope, detail))
            return
        headers = [
            (_text(k), _text(v))
            for k, v in scope["headers"]
            if k not in HOP_BY_HOP and k != PEER_HEADER and k != b"content-length"
        ]
        name, value = peer_header(scope)
        headers.append((name.decode(), value.decode("latin-1")))
        query = scope.get("query_string", b"").decode("latin-1")
        url = URL("http://console" + raw_path + ("?" + query if query else ""), encoded=True)
        has_body = any(k in (b"content-length", b"transfer-encoding") for k, _ in scope["headers"])
        try:
            answer = await self.session().request(
                scope["method"],
                url,
                headers=headers,
                data=body if has_body else None,
                allow_redirects=False,
                skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
            )
        except aiohttp.ClientConnectionError as exc:  # no socket, refused, or closed before an answer
            log.warning("the console process did not answer %s %s: %s", scope["method"], scope["path"], exc)
            await _unavailable(scope, send)
            return
        async with answer:
            kept = [(k, v) for k, v in answer.raw_headers if k.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": answer.status, "headers": kept})
            async for chunk in answer.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


def _text(raw: bytes) -> str:
    """A header's bytes as aiohttp's text, which it sends as UTF-8: exact for UTF-8 and ASCII."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


async def _body(receive: Receive) -> bytes:
    """The request's whole body. Raises ClientGone if the client disconnects first, BodyTooLarge past
    HEARTH_MAX_BODY_BYTES."""
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        part = message.get("body", b"")
        size += len(part)
        if size > settings.HEARTH_MAX_BODY_BYTES:
            raise BodyTooLarge
        parts.append(part)
        if not message.get("more_body", False):
            return b"".join(parts)


def _detail(scope: Scope, detail: str, page: bytes = b"") -> tuple[bytes, bytes]:
    """(content type, body) of an error in console.api's shape under /api/, else ``page`` or plain text."""
    if scope["path"].startswith("/api/"):
        return b"application/json", json.dumps({"detail": detail}).encode()
    if page:
        return b"text/html; charset=utf-8", page
    return b"text/plain; charset=utf-8", detail.encode() + b"\n"


async def _answer(send: Send, status: int, kind: bytes, body: bytes, extra: Headers = ()) -> None:
    headers = [(b"content-type", kind), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


UNAVAILABLE_PAGE = b"""<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>Hearth: the console is starting</title></head><body>
<h1>The console is not answering</h1><p>It may be starting again; this page reloads itself every 2 seconds.
The API at /v1 is served meanwhile.</p></body></html>
"""


UNAVAILABLE_CSP = b"default-src 'none'; base-uri 'none'; frame-ancestors 'none'"  # the page loads nothing, as Django's


async def _unavailable(scope: Scope, send: Send) -> None:
    detail = "The console is not answering (it may be starting); try again in a moment."
    headers = ((b"retry-after", RETRY_AFTER), (b"content-security-policy", UNAVAILABLE_CSP))
    await _answer(send, 503, *_detail(scope, detail, UNAVAILABLE_PAGE), headers)
