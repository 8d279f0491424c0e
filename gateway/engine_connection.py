"""One kept-alive HTTP/1.1 connection to an engine (gateway.upstream's pool keeps them): an asyncio protocol that
sends a request whole and reads the answer with httptools' parser, the parser uvicorn reads the clients' requests
with. It notes the answer's status and headers, buffers its body until the reader takes it (or hands each read's to
a sink, Answer.chunks), stops reading above HIGH_WATER bytes unread, fails an exchange that stays silent for
``read_timeout`` seconds (TimeoutError), and one cut short (UpstreamBroken). While gateway.fast_forward
relays the answer, the C reads the socket and this connection only waits for it back.
"""

import asyncio
import socket
import time
from collections.abc import Callable
from typing import cast

import httptools

from gateway.fast_forward import Handover
from gateway.upstream_errors import UpstreamBroken, UpstreamUnreachable

HIGH_WATER = 256 * 1024  # bytes of an answer buffered unread before its connection stops being read


class EngineConnection(asyncio.Protocol):
    """One kept-alive connection to an engine, carrying one exchange at a time."""

    def __init__(self, read_timeout: float) -> None:
        self.read_timeout = read_timeout
        self.transport: asyncio.Transport | None = None
        self.fd: int | None = None  # the socket gateway.fast_forward may read: a plain TCP one (not TLS)
        self.closed = False
        self.idle_since = 0.0  # monotonic seconds
        self._watchdog: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.headers: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.status = 0
        self.content_type = ""
        self.framed = False  # Content-Length or chunked: the answer does not end with the connection
        self.body: list[bytes] = []
        self.buffered = 0  # bytes in ``body``
        self.complete = False
        self.keep_alive = False  # read when the answer completes (the parser forgets after it)
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.sink: Callable[[bytes], None] | None = None  # set while the reader waits: see Answer.chunks
        self.sink_stopped = False
        self.last_read = time.monotonic()
        self.paused = False
        self.chunk_end = False  # the parser's last step ended a chunk of a chunked answer
        self.last_data = b""  # the last read
        self.handover: Handover | None = None  # the answer being relayed by gateway.fast_forward

    def begin(self, request: bytes) -> None:
        """Send ``request`` (head and body) and start watching for silence."""
        assert self.transport is not None
        self._reset()
        self.transport.write(request)
        self._arm(self.read_timeout)

    def finish(self) -> None:
        """Stop watching: the exchange is over."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def abort(self) -> None:
        self.finish()
        self.closed = True
        if self.handover is not None:  # before the socket closes: the C reads it
            self.handover.take_back()
        if self.transport is not None:
            self.transport.abort()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.fd = sock.fileno() if transport.get_extra_info("sslcontext") is None else None

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        self.last_data = data
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamBroken(f"the engine sent what is not HTTP: {exc}"))
            self.abort()
            return
        if self.sink is not None and self.body:  # one piece per read, however many chunks it framed
            self.sink(self.take())

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.finish()
        if not self.headers.done():
            self.headers.set_exception(UpstreamUnreachable("the engine closed the connection without an answer"))
        elif not self.complete and not self.framed and self.error is None:
            self.complete = True  # an answer without a length ends with its connection
        elif not self.complete:
            self._fail(UpstreamBroken("the engine closed the connection before the end of its answer"))
        self._wake()

    def pause_writing(self) -> None:
        """Never needed: a request is written whole, in one call."""

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self.content_type = value.decode("latin-1")
        elif name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value.lower()):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.headers.set_result(None)

    def on_chunk_header(self) -> None:
        self.chunk_end = False

    def on_chunk_complete(self) -> None:
        self.chunk_end = True

    def on_body(self, body: bytes) -> None:
        self.chunk_end = False
        self.body.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        if self.sink is None:  # a sink takes it at the end of this read (data_received)
            self._wake()

    def on_message_complete(self) -> None:
        self.complete, self.keep_alive = True, self.parser.should_keep_alive()
        self.finish()
        self._wake()

    def take(self) -> bytes:
        """What arrived of the body since the last call, in one piece."""
        data = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        self.body.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.last_read = time.monotonic()
            self.transport.resume_reading()
        return data

    def socket_to_hand_over(self) -> int | None:
        """This connection's socket (file descriptor) when its answer can be relayed by gateway.fast_forward's
        C from the next byte on: the last read ended a chunk of a chunked answer (a read that ends a chunk
        ends with its CRLF; one that ends within the next chunk's size line does not), its body is taken, reading
        is not paused, and the connection is not TLS (``fd``, known from its start). None otherwise."""
        if self.fd is None or self.transport is None or self.closed or self.handover is not None:
            return None
        if not self.chunk_end or not self.last_data.endswith(b"\r\n") or self.body or self.paused or self.complete:
            return None
        return self.fd

    def hand_over(self, handover: Handover) -> None:
        """The C reads this connection's socket from now on (``socket_to_hand_over``)."""
        assert self.transport is not None
        self.handover = handover
        self.transport.pause_reading()

    def taken_back(self, held: bytes, last_read: float, read_on: bool) -> None:
        """The answer is this connection's again: ``held`` (what the C read and did not relay) read as if
        it had just arrived, when ``read_on`` and the connection is not closed. ``last_read``: monotonic seconds."""
        self.handover = None
        self.last_read = max(self.last_read, last_read)
        if self.closed or not read_on or self.transport is None:
            return
        if not self.paused:
            self.transport.resume_reading()
        if held:
            self.data_received(held)

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        if not self.headers.done():
            self.headers.set_exception(error if isinstance(error, TimeoutError) else UpstreamUnreachable(str(error)))
        self._wake()

    def _arm(self, delay: float) -> None:
        self._watchdog = asyncio.get_running_loop().call_later(delay, self._check_silence)

    def _check_silence(self) -> None:
        """One timer per exchange, not one per read: it looks again when the silence could be long enough.
        While reading is paused (the client is slow), the engine is not the one silent."""
        if self.handover is not None:
            self.last_read = max(self.last_read, self.handover.seen().last_read)
        silent = time.monotonic() - self.last_read
        if silent < self.read_timeout or self.paused:
            self._arm(self.read_timeout - silent if not self.paused else self.read_timeout)
            return
        self._watchdog = None
        self._fail(TimeoutError(f"the engine sent nothing for {self.read_timeout:.0f} s"))
        self.abort()
