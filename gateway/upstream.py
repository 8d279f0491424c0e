"""The gateway's HTTP/1.1 client for its engines: kept-alive connections per engine (gateway.engine_connection),
answers read by httptools.

Chosen by benchmark, as FACTS.md asks of the upstream client. Against a fake engine on this 2-core
machine a bare relay spent ~230 µs of CPU per short streamed request with aiohttp's client and ~135 µs
with an asyncio protocol feeding httptools' parser (the one uvicorn reads the clients' requests with);
per streamed chunk ~25 against ~18 µs. Engines are HTTP servers on the appliance's own network (vLLM and
SGLang run uvicorn, the simulator aiohttp), or endpoints Hearth did not launch (engines.external), so this
client does only what they need: http, or https checked against the system's CAs, below a base URL's path;
POST (and GET, for gateway.engine_load's /metrics), no proxy, no redirect, no compression asked for (the bytes
are relayed as they come). Every request carries the hop header (appliance.hop_marker) that lets a Hearth
refuse a request that came back to it. Before a connection to an endpoint Hearth did not launch, an ``Admit``
(gateway.connect_policy) gives the addresses the address policy lets it connect to now; only those are tried.

Errors (gateway.upstream_errors): ``UpstreamUnreachable`` when no answer began (connection refused or failed, or
closed before the status line; ``UpstreamRefused``, one of them, when the address policy refuses where the endpoint
is now); ``TimeoutError`` after ``read_timeout`` seconds without a byte, before the status line (the engine has the
request and may be running it: a non-streamed answer's head comes only at its end, so the request must not be sent
again elsewhere) or while the relay was reading; once an answer began, ``UpstreamBroken`` when it is cut (closed
early, or bytes that are not HTTP).
"""

import asyncio
import functools
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import NamedTuple
from urllib.parse import urlsplit

from appliance.hop_marker import HEADER as HOP_HEADER
from gateway.engine_connection import EngineConnection
from gateway.fast_forward import Handover
from gateway.upstream_errors import UpstreamBroken, UpstreamUnreachable

IDLE_KEEP = 4.0  # seconds an idle connection is kept: under the 5 s keep-alive of uvicorn (vLLM, SGLang)


class Target(NamedTuple):
    """Where a base URL points: the connection's host, port and whether it is TLS, and the path before /v1."""

    host: str
    port: int
    tls: bool
    prefix: str


@functools.lru_cache(maxsize=1024)
def target_of(base_url: str) -> Target:
    """``http://h:8000`` → Target("h", 8000, False, ""); ``https://[::1]/x`` → Target("::1", 443, True, "/x")."""
    parts = urlsplit(base_url)
    tls = parts.scheme == "https"
    return Target(parts.hostname or "", parts.port or (443 if tls else 80), tls, parts.path.rstrip("/"))


# Where an external endpoint's host:port may be connected to now: its admitted addresses, in order. Raises
# UpstreamRefused, or UpstreamUnreachable when the host does not resolve.
Admit = Callable[[str, int], Awaitable[Sequence[str]]]


class Answer:
    """An engine's answer once its status line and headers are in; use as ``async with`` so that its
    connection goes back to the pool when the answer was read to its end, and is closed otherwise."""

    def __init__(self, pool: "Engines", key: Target, connection: EngineConnection) -> None:
        self._pool, self._key, self._connection = pool, key, connection
        self.status = connection.status
        self.content_type = connection.content_type  # the header as sent, "" when absent

    @property
    def mimetype(self) -> str:
        """The content type without its parameters, lower case ("text/event-stream")."""
        return self.content_type.partition(";")[0].strip().lower()

    @property
    def complete(self) -> bool:
        """The whole body has arrived (what ``chunks`` has not yielded yet aside)."""
        return self._connection.complete

    async def chunks(self, sink: Callable[[bytes], None] | None = None) -> AsyncIterator[bytes]:
        """The body as it arrives, each piece what came since the previous one.

        With ``sink``, a piece that arrives while this waits for one is handed to ``sink`` at once, in the
        connection's own read callback, and not yielded: the relay's fast path, with no task switch per
        piece. A sink that cannot go on that way calls ``stop_sink``; the next pieces are yielded again, and
        b"" is yielded when none is there yet, so that the caller can finish what its sink left."""
        connection = self._connection
        while True:
            if connection.body:
                yield connection.take()
            elif connection.sink_stopped:
                connection.sink_stopped = False
                yield b""
            elif connection.complete:
                return
            elif connection.error is not None:
                raise connection.error
            elif connection.closed:
                raise UpstreamBroken("the connection to the engine is closed")
            else:
                connection.waiter = asyncio.get_running_loop().create_future()
                connection.sink = sink
                try:
                    await connection.waiter
                finally:
                    connection.waiter = connection.sink = None

    def socket_to_hand_over(self) -> int | None:
        """The engine connection's socket, when the answer can be handed to gateway.fast_forward now."""
        return self._connection.socket_to_hand_over()

    def hand_over(self, handover: Handover) -> None:
        """The C reads the answer from now on."""
        self._connection.hand_over(handover)

    def taken_back(self, held: bytes, last_read: float, read_on: bool) -> None:
        """The answer read here again, from ``held`` on (gateway.fast_forward.Back)."""
        self._connection.taken_back(held, last_read, read_on)

    def stop_sink(self) -> None:
        """From the sink of ``chunks``: hand it nothing more, and wake the reader."""
        connection = self._connection
        connection.sink, connection.sink_stopped = None, True
        connection._wake()

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.chunks()])

    def close(self) -> None:
        connection = self._connection
        connection.finish()
        if connection.complete and connection.keep_alive and not connection.closed:
            self._pool.release(self._key, connection)
        else:
            connection.abort()

    async def __aenter__(self) -> "Answer":
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Engines:
    """Connections to the engines, kept alive between requests; no limit on how many are open at once."""

    def __init__(
        self,
        connect_timeout: float,
        read_timeout: float,
        tls: ssl.SSLContext | None = None,
        hop: str = "",
        admit: Admit | None = None,
    ) -> None:
        """``tls``: how https engines are checked (default: the system's CAs, hostnames checked); ``hop``: the
        hop header of a request given none (this appliance's marker; "" sends none); ``admit``: asked before
        connecting to an external endpoint (None: connect wherever its host resolves)."""
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout  # seconds
        self.tls, self.hop, self.admit = tls, hop, admit
        self._idle: dict[Target, deque[EngineConnection]] = {}  # oldest first

    async def post(
        self, base_url: str, path: str, api_key: str, body: bytes, hops: str = "", external: bool = False
    ) -> Answer:
        """POST ``body`` (JSON) to ``base_url + path`` with ``Authorization: Bearer api_key`` (none when
        ``api_key`` is "") and the hop header ``hops`` (default ``hop``); the answer once its headers are in.
        A new connection to an ``external`` endpoint goes only where ``admit`` lets it. A kept-alive
        connection that turns out closed is replaced by a new one once. Raises UpstreamUnreachable (a failed
        TLS handshake among the causes; UpstreamRefused by the address policy), or TimeoutError when the
        engine took the request and stayed silent."""
        key = target_of(base_url)
        return await self._send(key, self._head("POST", key, path, api_key, hops, body) + body, external)

    async def get(self, base_url: str, path: str, api_key: str) -> Answer:
        """GET ``base_url + path`` of an engine Hearth launched (its /metrics), as ``post`` does, without a body."""
        key = target_of(base_url)
        return await self._send(key, self._head("GET", key, path, api_key, "", None), False)

    def _head(self, method: str, key: Target, path: str, api_key: str, hops: str, body: bytes | None) -> bytes:
        host = f"[{key.host}]" if ":" in key.host else key.host  # an IPv6 address is bracketed in a URL and Host
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        hop = hops or self.hop
        hop_line = f"{HOP_HEADER}: {hop}\r\n" if hop else ""
        framing = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n" if body is not None else ""
        head = f"{method} {key.prefix}{path} HTTP/1.1\r\nHost: {host}:{key.port}\r\n{auth}{hop_line}{framing}\r\n"
        return head.encode("latin-1")

    async def _send(self, key: Target, request: bytes, external: bool) -> Answer:
        connection = self._take_idle(key)
        if connection is not None:
            try:
                return await self._exchange(key, connection, request)
            except UpstreamUnreachable:
                if not connection.closed or connection.error is not None:
                    raise  # silent or garbled, not a connection the engine had closed while idle
        return await self._exchange(key, await self._connect(key, external), request)

    def release(self, key: Target, connection: EngineConnection) -> None:
        """Keep ``connection`` for the next request to its engine (and close those idle too long)."""
        now = connection.idle_since = time.monotonic()
        connections = self._idle.setdefault(key, deque())
        while connections and (connections[0].closed or now - connections[0].idle_since >= IDLE_KEEP):
            connections.popleft().abort()
        connections.append(connection)

    def close(self) -> None:
        """Close the idle connections (answers being read close theirs when they end)."""
        for connections in self._idle.values():
            for connection in connections:
                connection.abort()
        self._idle.clear()

    async def _exchange(self, key: Target, connection: EngineConnection, request: bytes) -> Answer:
        connection.begin(request)
        try:
            await connection.headers
        except BaseException:  # unreachable, or the client left: either way this exchange is over
            connection.abort()
            raise
        return Answer(self, key, connection)

    def _take_idle(self, key: Target) -> EngineConnection | None:
        connections = self._idle.get(key)
        now = time.monotonic()
        while connections:
            connection = connections.pop()
            if not connection.closed and now - connection.idle_since < IDLE_KEEP:
                return connection
            connection.abort()
        return None

    async def _connect(self, key: Target, external: bool) -> EngineConnection:
        """A new connection to ``key``: to its host as it resolves, or, for an ``external`` endpoint under an
        ``admit``, to each address admitted in turn until one connects (TLS still checks the host's name)."""
        loop = asyncio.get_running_loop()
        tls = (self.tls or _system_tls()) if key.tls else None
        error: BaseException | None = None
        try:
            async with asyncio.timeout(self.connect_timeout):
                addresses = await self.admit(key.host, key.port) if external and self.admit else (key.host,)
                for address in addresses:
                    try:
                        _, connection = await loop.create_connection(
                            lambda: EngineConnection(self.read_timeout),
                            address,
                            key.port,
                            ssl=tls,
                            server_hostname=key.host if tls else None,
                        )
                        return connection
                    except OSError as exc:  # ssl.SSLError is an OSError
                        error = exc
        except TimeoutError as exc:
            error = exc
        why = (str(error) or type(error).__name__) if error is not None else "no address"
        raise UpstreamUnreachable(f"cannot connect to {key.host}:{key.port}: {why}")


@functools.cache
def _system_tls() -> ssl.SSLContext:
    return ssl.create_default_context()
