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
(appliance.console_peer); the body is streamed with the client's Content-Length. Not followed or kept: redirects
(the browser's to follow), cookies (a DummyCookieJar: the session is shared by every user), compression
(bytes pass as they are). An answer's head is sent only once the console gave it; if the console cannot be
reached the client gets 503 with Retry-After (JSON ``{"detail": ...}`` under /api/, as console.api
answers, plain text elsewhere); an answer cut after its head ends the client's connection without the
chunked terminator, so it never looks complete.

Imports nothing of Hearth's but appliance.console_peer.
"""

import json
import logging
from collections.abc import AsyncIterator

import aiohttp
from yarl import URL

from appliance.console_peer import PEER_HEADER, Receive, Scope, Send, peer_header

log = logging.getLogger(__name__)
HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"proxy-connection",
              b"te", b"trailer", b"transfer-encoding", b"upgrade"}  # fmt: skip
CONNECT_TIMEOUT = 5.0  # seconds to reach the console's socket; a page itself may take as long as it takes
RETRY_AFTER = b"2"  # seconds: about a console process's start


class ClientGone(Exception):
    """The client left while its request's body was being forwarded: the forward is abandoned."""


class ConsoleProxy:
    """An ASGI app forwarding http requests to the console process listening on ``socket_path``."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:  # made on the event loop that uses it, at the first request
            self._session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=self.socket_path, keepalive_timeout=4),
                cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT),
            )  # fmt: skip
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the console serves no websocket
            return
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]
                   if k not in HOP_BY_HOP and k != PEER_HEADER]  # fmt: skip
        name, value = peer_header(scope)
        headers.append((name.decode(), value.decode("latin-1")))
        query = scope.get("query_string", b"").decode("latin-1")
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        url = URL("http://console" + raw_path + ("?" + query if query else ""), encoded=True)
        names = {k for k, _ in scope["headers"]}
        has_body = b"content-length" in names or b"transfer-encoding" in names
        try:
            answer = await self.session().request(
                scope["method"], url, headers=headers, data=_body(receive) if has_body else None, allow_redirects=False,
                skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
            )  # fmt: skip
        except aiohttp.ClientConnectionError as exc:  # no socket, refused, or closed before an answer
            if isinstance(exc.__cause__, ClientGone):  # aiohttp closed the console's connection: nobody to answer
                return
            log.warning("the console process did not answer %s %s: %s", scope["method"], scope["path"], exc)
            await _unavailable(scope, send)
            return
        async with answer:
            kept = [(k, v) for k, v in answer.raw_headers if k.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": answer.status, "headers": kept})
            async for chunk in answer.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    """The request's body as the client sends it (an async generator aiohttp streams). Raises ClientGone
    if the client disconnects first (ending the body early would leave the console waiting for the rest)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body", False):
            return


async def _unavailable(scope: Scope, send: Send) -> None:
    detail = "The console is not answering (it may be starting); try again in a moment."
    if scope["path"].startswith("/api/"):
        body, kind = json.dumps({"detail": detail}).encode(), b"application/json"
    else:
        body, kind = detail.encode() + b"\n", b"text/plain; charset=utf-8"
    headers = [(b"content-type", kind), (b"retry-after", RETRY_AFTER)]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
