"""The ASGI shapes the gateway's modules share (scope, receive, send), whether a client left (``client_left``),
its one way to answer JSON, a way to send outside a task (``send_now``), and a streamed body's pieces written
straight to the server's connection (``body_writer``)."""

from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from types import CoroutineType
from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]


def client_left(receive: Receive | None) -> bool:
    """Whether the client of the server connection ``receive`` reads has closed it, as soon as the server saw it,
    before any task reads the ``http.disconnect``: uvicorn's cycle ``disconnected``, or its transport closing (a
    client's half-close is seen so while what was written to it drains); False for a ``receive`` that is not a
    server connection's (a batch's line)."""
    cycle = getattr(receive, "__self__", None)
    if cycle is None or getattr(cycle, "disconnected", None) is None:
        return False
    return bool(cycle.disconnected or cycle.transport.is_closing())


async def send_json(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """A whole JSON answer: ``body`` already encoded, ``headers`` beside its content type."""
    all_headers = [(b"content-type", b"application/json"), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})


def send_now(send: Send, message: Mapping[str, Any]) -> "PendingSend | None":
    """Run ``send(message)`` as far as it goes without waiting, outside any task (the relay's fast path,
    gateway.relay): None when it finished so, else an awaitable of the rest, for a task to await. A server's
    ``send`` waits only when the client reads slower than it is sent to (uvicorn's flow control)."""
    awaitable = send(message)
    sending = awaitable if isinstance(awaitable, CoroutineType) else _awaited(awaitable)  # not the slower ABC
    try:
        waiting_on = sending.send(None)
    except StopIteration:
        return None
    return PendingSend(sending, waiting_on)


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable


class PendingSend:
    """The rest of a coroutine started by hand that is waiting on ``waiting_on`` (what it yielded): awaiting
    this yields that to the awaiting task, then carries on as ``await`` would have (``yield from``)."""

    def __init__(self, coroutine: Coroutine[Any, Any, None], waiting_on: Any) -> None:
        self.coroutine, self.waiting_on = coroutine, waiting_on

    def __await__(self) -> Generator[Any, Any, None]:
        coroutine, waiting_on = self.coroutine, self.waiting_on
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # a cancellation of the awaiting task, passed on
                try:
                    waiting_on = coroutine.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    waiting_on = coroutine.send(sent)
                except StopIteration:
                    return

    def close(self) -> None:
        """When it will never be awaited: the send is abandoned where it waits."""
        self.coroutine.close()


class BodyWriter:
    """A streamed answer's pieces written to the client's connection as uvicorn's ``send`` writes them (httptools'
    protocol, uvicorn/protocols/http/httptools_impl.py ``RequestResponseCycle.send``: a chunk of the chunked
    encoding, one ``transport.write``), without its coroutine and message (issue 35: the relay's CPU per chunk).
    Only a piece that is not the body's last: the end still goes through ``send``, which completes the response."""

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self.cycle = cycle

    def write(self, body: bytes) -> bool:
        """Write ``body`` (not empty) now; False, having written nothing, when ``send`` must: the client reads
        slower than it is sent to (``send`` waits for it), it left, or the head is not out in chunked encoding."""
        cycle = self.cycle
        if cycle.flow.write_paused or cycle.disconnected or cycle.response_complete or not cycle.chunked_encoding:
            return False
        cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return True


def body_writer(send: Send) -> BodyWriter | None:
    """The ``BodyWriter`` of the server connection ``send`` ends at (through wrappers that name what they wrap
    ``wrapped``), once its response head is out; None for a server other than uvicorn's httptools protocol, and for
    a subclass of its cycle, which may frame a body otherwise (appliance.http_protocol's HTTP/1.0 cycle)."""
    while (wrapped := getattr(send, "wrapped", None)) is not None:
        send = wrapped
    cycle = getattr(send, "__self__", None)
    if type(cycle) is not RequestResponseCycle or not cycle.response_started:
        return None
    return BodyWriter(cycle)
