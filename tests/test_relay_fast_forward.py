"""Plain content relayed in C (gateway.fast_forward, gateway/native/fast_forward.c; issue 35): a real uvicorn
(httptools' protocol, as the appliance runs it) relaying a scripted engine to a raw client. The C takes a stream once
its content is plain and gives it back at whatever it must not relay itself; the client gets the
same bytes either way, with every guarantee of the Python path: keep-alives in a silence, the in-stream error of a
stream the engine cut, the engine's request aborted when the client leaves, uvicorn's flow control for a slow
client. Each test notes what the C gave back (``Backs``)."""

import asyncio
import dataclasses
import itertools
import os
import re
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import hearth_fast_forward
import pytest

from gateway import fast_forward
from gateway.asgi_io import Receive, Scope, Send
from gateway.sse import plain_events
from gateway.upstream import Engines
from tests.test_gateway_exchange import exchange, numbered, route, stream
from tests.test_gateway_upstream import SSE, Server, chunk, request
from tests.test_relay_direct_write import HEAD_END, dechunked, uvicorn_serving

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Reader = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bytes]]
STREAMS = Path(__file__).parent / "data" / "streams"


class Backs:
    """What the C gave back, stream by stream (gateway.fast_forward.Back)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[fast_forward.Back] = []
        hand_over = fast_forward.hand_over

        def noted(
            engine_fd: int, client_fd: int, back: Callable[[fast_forward.Back], None]
        ) -> fast_forward.Handover | None:
            def noting(given: fast_forward.Back) -> None:
                self.seen.append(given)
                back(given)

            return hand_over(engine_fd, client_fd, noting)

        monkeypatch.setattr(fast_forward, "hand_over", noted)

    @property
    def reasons(self) -> list[int]:
        return [back.reason for back in self.seen]

    @property
    def events(self) -> int:
        return sum(back.events for back in self.seen)


async def read_whole(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    response = b""
    while not response.endswith(b"\r\n0\r\n\r\n") and (read := await reader.read(65536)):
        response += read
    return response


async def served(script: Script, read: Reader = read_whole, keepalive_every: float = 15.0) -> bytes:
    """The raw response a client reading with ``read`` got from a uvicorn relaying what ``script`` streams."""
    async with Server(script) as engine:
        engines = Engines(1, 5)

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            relay = exchange(engines, route(engine.url))
            relay.plan = dataclasses.replace(relay.plan, keepalive_every=keepalive_every)
            await relay.serve(receive, send)

        try:
            async with uvicorn_serving(app) as address:
                client = socket.socket()
                client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                client.connect(address)
                reader, writer = await asyncio.open_connection(sock=client)
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}")
                try:
                    return await read(reader, writer)
                finally:
                    writer.close()
        finally:
            engines.close()


def body_of(response: bytes) -> bytes:
    head, _, body = response.partition(HEAD_END)
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head
    return dechunked(body)


def open_sockets() -> int:
    """This process's open sockets: the C's copies of a stream's two are closed when it gives the stream back."""
    sockets = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            sockets += os.readlink(fd).startswith("socket:")
        except FileNotFoundError:  # the listing's own descriptor
            pass
    return sockets


def test_plain_content_goes_through_the_c_and_the_rest_through_python(monkeypatch: pytest.MonkeyPatch) -> None:
    backs = Backs(monkeypatch)
    events = numbered(50)
    before = open_sockets()
    body = body_of(asyncio.run(asyncio.wait_for(served(stream(*events, end="whole", gap=0.002)), 20)))
    assert body == b"".join(events)
    assert backs.events >= 40  # the first plain piece and the last (finish, [DONE]) went through Python
    assert backs.reasons[-1] == hearth_fast_forward.NOT_PLAIN
    assert open_sockets() == before


def test_pieces_that_are_not_plain_go_back_to_python_and_the_c_takes_the_stream_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backs = Backs(monkeypatch)
    text, end = numbered(30)[:30], numbered(1)[-1]
    tool = b'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}, "finish_reason": null}]}\n\n'
    crlf = text[5].replace(b"\n\n", b"\r\n\r\n")
    events = [*text[:10], tool, *text[10:20], crlf, *text[20:], end]
    body = body_of(asyncio.run(asyncio.wait_for(served(stream(*events, end="whole", gap=0.002)), 20)))
    assert body == b"".join(events).replace(b"\r\n", b"\n")
    assert backs.reasons.count(hearth_fast_forward.NOT_PLAIN) >= 2


def test_a_client_reading_late_gets_the_whole_stream_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    backs = Backs(monkeypatch)
    padding = b"x" * 2000
    events = [event.replace(b'"}, "', padding + b'"}, "', 1) for event in numbered(400)]  # ~800 KB in all

    async def late(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        await asyncio.sleep(0.5)
        return await read_whole(reader, writer)

    body = body_of(asyncio.run(asyncio.wait_for(served(stream(*events, end="whole", gap=0.001), late), 30)))
    assert body == b"".join(events)
    assert hearth_fast_forward.CLIENT_SLOW in backs.reasons  # uvicorn's flow control took over


def test_a_silent_engine_has_its_stream_taken_back_for_keep_alives(monkeypatch: pytest.MonkeyPatch) -> None:
    backs = Backs(monkeypatch)
    events = numbered(20)

    async def pausing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(SSE)
        for i, event in enumerate(events):
            writer.write(chunk(event))
            await writer.drain()
            await asyncio.sleep(1.5 if i == 10 else 0.002)
        writer.write(b"0\r\n\r\n")
        await reader.read()

    body = body_of(asyncio.run(asyncio.wait_for(served(pausing, keepalive_every=0.4), 20)))
    assert hearth_fast_forward.TAKEN in backs.reasons
    assert body != b"".join(events) and re.sub(b"\n\n\n+", b"\n\n", body) == b"".join(events)  # blank lines added


def test_a_stream_the_engine_cuts_while_the_c_relays_it_ends_with_the_error_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backs = Backs(monkeypatch)
    events = numbered(20)[:20]
    body = body_of(asyncio.run(asyncio.wait_for(served(stream(*events, end="close", gap=0.002)), 20)))
    assert body.startswith(b"".join(events))
    assert b"upstream_truncated" in body[len(b"".join(events)) :]
    assert hearth_fast_forward.ENGINE_CLOSED in backs.reasons


def test_a_client_that_leaves_while_the_c_relays_aborts_the_engines_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backs = Backs(monkeypatch)
    engine_saw_close = asyncio.Event()

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(SSE)
        text = numbered(1)[0]
        try:
            while True:
                writer.write(chunk(text))
                await writer.drain()
                await asyncio.sleep(0.005)
        except ConnectionError:
            engine_saw_close.set()

    async def leaving(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        got = await reader.read(65536)
        await asyncio.sleep(0.3)
        writer.transport.abort()
        await asyncio.wait_for(engine_saw_close.wait(), 5)
        return got

    asyncio.run(asyncio.wait_for(served(endless, leaving), 20))
    assert hearth_fast_forward.CLIENT_EVENT in backs.reasons


def engine_events() -> list[bytes]:
    """Every event of the recorded engine streams (tests/data/streams), alone and each with the next."""
    events = []
    for path in sorted(STREAMS.glob("*.sse")):
        text = path.read_bytes().replace(b"\r\n", b"\n")
        events += [event + b"\n\n" for event in text.split(b"\n\n") if event]
    return [*events, *(a + b for a, b in itertools.pairwise(events))]


CASES = [
    b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason": null}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n',
    b'data: {"choices":[{"delta":{"reasoning_content":"hm"},"finish_reason":null}]}\n\n',
    b'data: {"choices":[{"delta":{"reasoning":null,"tool_calls":null,"content":"a"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"\\u00e9"}}]}\n\n',
    b'data: {"choices":[],"usage":{"completion_tokens":3}}\n\n',
    b"data: [DONE]\n\n",
    b"data: a\r\n\r\n",
    b"data: a\ndata: b\n\n",
    b"data: a\n\n\n",
    b"data: a\n\ndata: b\n\n",
    b": comment\n\ndata: a\n\n",
    b"data:\n\n",
    b"data: a\n",
    b"",
]


@pytest.mark.parametrize("data", [*CASES, *engine_events()])
def test_the_c_test_for_plain_content_is_gateway_sse_plain_events(data: bytes) -> None:
    assert hearth_fast_forward.plain_events(data) == plain_events(data)
