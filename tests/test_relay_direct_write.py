"""A stream's pieces written straight to uvicorn's connection by Python (gateway.asgi_io.BodyWriter, issue 35; the
native relay, which takes such a stream after its first piece, is off here): a real uvicorn (httptools' protocol, as
the appliance runs it) serving a relay of a scripted engine to a raw client. The client gets the engine's stream whole
and in order, in uvicorn's chunked encoding, whether it reads as fast as it comes or slower (uvicorn's flow control: a
piece the writer cannot write goes through ``send``, which waits)."""

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import uvicorn

from gateway import asgi_io, fast_forward
from gateway.asgi_io import Receive, Scope, Send
from gateway.upstream import Engines
from tests.test_gateway_exchange import exchange, numbered, route, stream
from tests.test_gateway_upstream import Server

HEAD_END = b"\r\n\r\n"


@pytest.fixture(autouse=True)
def python_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every piece relayed by Python: the path of a checkout without the native relay, and of the pieces it gives
    back (tests/test_relay_fast_forward.py)."""
    monkeypatch.setattr(fast_forward, "BUILT", False)


class Writes:
    """What ``BodyWriter.write`` answered, piece by piece: True when it wrote one, False when ``send`` had to."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.answers: list[bool] = []
        write = asgi_io.BodyWriter.write

        def noted(writer: asgi_io.BodyWriter, body: bytes) -> bool:
            self.answers.append(write(writer, body))
            return self.answers[-1]

        monkeypatch.setattr(asgi_io.BodyWriter, "write", noted)


def dechunked(body: bytes) -> bytes:
    """An HTTP/1.1 chunked body's data, checked to end with its last chunk."""
    data, at = b"", 0
    while True:
        size_end = body.index(b"\r\n", at)
        size = int(body[at:size_end], 16)
        if size == 0:
            assert body[size_end:] == b"\r\n\r\n"
            return data
        data += body[size_end + 2 : size_end + 2 + size]
        at = size_end + 2 + size + 2


@contextlib.asynccontextmanager
async def uvicorn_serving(app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> AsyncIterator[tuple[str, int]]:
    """A real uvicorn (httptools' protocol) serving ``app`` on 127.0.0.1, its sockets' send buffers kept small so that
    its writes pause for a client that reads late: the address, until the block ends."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # the accepted sockets' too
    listener.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, http="httptools", lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    serving = asyncio.ensure_future(server.serve(sockets=[listener]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        yield listener.getsockname()
    finally:
        server.should_exit = True
        await serving


async def relayed_by_uvicorn(events: list[bytes], read_late: float) -> bytes:
    """The raw response a client got from a uvicorn relaying ``events`` (sent 1 ms apart), its reading starting
    ``read_late`` seconds after its request (socket buffers kept small, so that uvicorn's writes pause meanwhile)."""
    async with Server(stream(*events, end="whole", gap=0.001)) as engine:
        engines = Engines(1, 5)

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            await exchange(engines, route(engine.url)).run(send)

        try:
            async with uvicorn_serving(app) as address:
                return await read_late_from(address, read_late)
        finally:
            engines.close()


async def read_late_from(address: tuple[str, int], read_late: float) -> bytes:
    """One chat request's raw response, read from ``read_late`` seconds after it was sent."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(address)
    reader, writer = await asyncio.open_connection(sock=client)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}")
    await asyncio.sleep(read_late)
    response = b""
    while not response.endswith(b"\r\n0\r\n\r\n") and (read := await reader.read(65536)):
        response += read
    writer.close()
    return response


def served(events: list[bytes], read_late: float) -> tuple[bytes, bytes]:
    """The response's head and its body's data."""
    response = asyncio.run(asyncio.wait_for(relayed_by_uvicorn(events, read_late), 20))
    head, _, body = response.partition(HEAD_END)
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head
    return head, dechunked(body)


def test_pieces_of_content_are_written_straight_to_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    writes = Writes(monkeypatch)
    events = numbered(50)
    _, body = served(events, read_late=0)
    assert body == b"".join(events)
    assert writes.answers.count(True) >= 40  # the first piece (read whole) and the ending go through send


def test_a_client_reading_late_gets_the_whole_stream_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    writes = Writes(monkeypatch)
    padding = b"x" * 2000
    events = [event.replace(b'"}, "', padding + b'"}, "', 1) for event in numbered(400)]  # ~800 KB in all
    _, body = served(events, read_late=0.5)
    assert body == b"".join(events)
    assert True in writes.answers and False in writes.answers  # uvicorn paused its writes: send took over


def test_chunks_that_are_not_plain_content_go_through_the_readers(monkeypatch: pytest.MonkeyPatch) -> None:
    writes = Writes(monkeypatch)
    split = [b'data: {"choices": [{"index": 0, "delta": {"content": "a"}, ', b'"finish_reason": null}]}\n\n']
    crlf = b'data: {"choices": [{"index": 0, "delta": {"content": "b"}, "finish_reason": null}]}\r\n\r\n'
    events = [*numbered(3)[:3], *split, crlf, *numbered(3)[-1:]]
    _, body = served(events, read_late=0)
    assert body == b"".join(events).replace(b"\r\n", b"\n")
    assert writes.answers.count(True) <= 2  # the first two numbered pieces after the first only
