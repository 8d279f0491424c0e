"""The gateway's HTTP client for its engines, against scripted servers on loopback."""

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gateway.engine_connection import HIGH_WATER
from gateway.upstream import Engines
from gateway.upstream_errors import UpstreamBroken, UpstreamUnreachable
from tests.outside import self_signed

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and body, b"" at the end of the connection."""
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    if not head:
        return b""
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length"))
    return head + await reader.readexactly(length)


class Server:
    """A loopback server running ``script`` on each connection; counts the connections."""

    def __init__(self, script: Script, tls: ssl.SSLContext | None = None) -> None:
        self.script, self.connections, self.url, self.tls = script, 0, "", tls

    async def __aenter__(self) -> "Server":
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.script(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=self.tls)
        scheme = "https" if self.tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 10))


def test_a_stream_arrives_piece_by_piece_and_its_connection_serves_the_next_request() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (seen := await request(reader)) != b"":
            assert b"Authorization: Bearer k\r\n" in seen and seen.endswith(b'{"a": 1}')
            writer.write(SSE)
            for event in (b"data: 1\n\n", b"data: 2\n\n"):
                writer.write(chunk(event))
                await writer.drain()
                await asyncio.sleep(0.05)
            writer.write(b"0\r\n\r\n")

    async def test() -> None:
        engines = Engines(connect_timeout=1, read_timeout=5)
        async with Server(script) as server:
            for _ in range(2):
                async with await engines.post(server.url, "/v1/chat/completions", "k", b'{"a": 1}') as answer:
                    assert answer.status == 200 and answer.mimetype == "text/event-stream"
                    assert [piece async for piece in answer.chunks()] == [b"data: 1\n\n", b"data: 2\n\n"]
            assert server.connections == 1
        engines.close()

    run(test)


def test_a_whole_answer_with_a_length_is_read() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n")
        writer.write(b'{"e": 42}')
        await reader.read()

    async def test() -> None:
        async with Server(script) as server:
            async with await Engines(1, 5).post(server.url, "/v1/completions", "k", b"{}") as answer:
                assert (answer.status, answer.content_type, await answer.read()) == (
                    400,
                    "application/json",
                    b'{"e": 42}',
                )

    run(test)


def test_nothing_listening_and_garbage_are_unreachable() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await reader.read()

    async def test() -> None:
        async with Server(garbage) as server:
            url = server.url
            with pytest.raises(UpstreamUnreachable, match="not HTTP"):
                await Engines(1, 5).post(url, "/v1/completions", "k", b"{}")
        with pytest.raises(UpstreamUnreachable, match="cannot connect"):
            await Engines(1, 5).post(url, "/v1/completions", "k", b"{}")

    run(test)


def test_an_answer_cut_short_is_broken() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(SSE + chunk(b"data: 1\n\n"))
        await writer.drain()

    async def test() -> None:
        async with Server(script) as server:
            answer = await Engines(1, 5).post(server.url, "/v1/chat/completions", "k", b"{}")
            pieces = []
            with pytest.raises(UpstreamBroken):
                async for piece in answer.chunks():
                    pieces.append(piece)
            assert pieces == [b"data: 1\n\n"]

    run(test)


def test_silence_before_or_after_the_headers_is_a_timeout_never_unreachable() -> None:
    """An engine that took the request and went silent may be running it (a long non-streamed answer sends
    its head only at the end): that is a timeout, which the relay never sends to another replica."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        await reader.read()

    async def thinking(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(SSE)
        await reader.read()

    async def test() -> None:
        engines = Engines(connect_timeout=1, read_timeout=0.2)
        async with Server(silent) as server:
            with pytest.raises(TimeoutError, match="sent nothing"):
                await engines.post(server.url, "/v1/chat/completions", "k", b"{}")
            assert server.connections == 1  # not sent again on a fresh connection either
        async with Server(thinking) as server:
            answer = await engines.post(server.url, "/v1/chat/completions", "k", b"{}")
            with pytest.raises(TimeoutError):
                await answer.read()

    run(test)


def test_a_connection_the_engine_closed_while_idle_is_replaced() -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()  # then the connection closes, as an engine's keep-alive timeout closes it

    async def test() -> None:
        engines = Engines(1, 5)
        async with Server(once) as server:
            for _ in range(2):
                async with await engines.post(server.url, "/health", "k", b"{}") as answer:
                    assert await answer.read() == b"ok"
                await asyncio.sleep(0.05)
            assert server.connections == 2

    run(test)


def test_leaving_an_answer_unread_closes_its_connection() -> None:
    left = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(SSE + chunk(b"data: 1\n\n"))
        assert await reader.read() == b""  # the client closed the connection
        left.set()

    async def test() -> None:
        async with Server(script) as server:
            async with await Engines(1, 5).post(server.url, "/v1/chat/completions", "k", b"{}") as answer:
                async for _ in answer.chunks():
                    break
            await asyncio.wait_for(left.wait(), 2)

    run(test)


def test_a_body_larger_than_the_buffer_arrives_whole_when_read_slowly() -> None:
    body = bytes(range(256)) * (3 * HIGH_WATER // 256)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        await reader.read()

    async def test() -> None:
        async with Server(script) as server:
            async with await Engines(1, 5).post(server.url, "/v1/completions", "k", b"{}") as answer:
                await asyncio.sleep(0.3)  # the engine writes on; the client reads nothing yet
                assert await answer.read() == body

    run(test)


def test_an_https_engine_below_a_path_is_reached_when_its_certificate_verifies_and_refused_when_not(
    tmp_path: Path,
) -> None:
    cert, key = self_signed(tmp_path)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    seen: list[bytes] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await request(reader))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()

    async def test() -> None:
        async with Server(script, tls=served) as server:
            trusting = Engines(1, 5, tls=ssl.create_default_context(cafile=str(cert)))
            async with await trusting.post(server.url + "/llm", "/v1/chat/completions", "", b"{}") as answer:
                assert (answer.status, await answer.read()) == (200, b"{}")
            with pytest.raises(UpstreamUnreachable, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
                await Engines(1, 5).post(server.url, "/v1/chat/completions", "k", b"{}")  # the system's CAs
            trusting.close()
        assert seen[0].startswith(b"POST /llm/v1/chat/completions HTTP/1.1\r\n")
        assert b"authorization" not in seen[0].lower()  # an endpoint that demands no key gets none

    run(test)


@pytest.mark.parametrize("over_tls", [False, True])
def test_a_stream_at_a_chunk_boundary_is_handed_over_only_from_a_plain_socket(over_tls: bool, tmp_path: Path) -> None:
    """gateway.fast_forward's C reads the engine's socket itself: never one that TLS wraps, which the connection
    knows from its start rather than asking its transport at every piece."""
    served, trusted = None, None
    if over_tls:
        cert, key = self_signed(tmp_path)
        served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        served.load_cert_chain(cert, key)
        trusted = ssl.create_default_context(cafile=str(cert))

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(SSE + chunk(b"data: 1\n\n"))
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(chunk(b"data: 2\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async def test() -> None:
        engines = Engines(1, 5, tls=trusted)
        async with Server(script, tls=served) as server:
            async with await engines.post(server.url, "/v1/chat/completions", "k", b"{}") as answer:
                pieces = answer.chunks()
                assert await anext(pieces) == b"data: 1\n\n"
                handed = answer.socket_to_hand_over()
                assert handed is None if over_tls else isinstance(handed, int)
                assert [piece async for piece in pieces] == [b"data: 2\n\n"]
        engines.close()

    run(test)
