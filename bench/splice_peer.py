"""The floor of a relay in Python: a uvloop TCP splice, as a peer for ``gateway_overhead.py`` (``--peers splice``).

Each client connection gets its own connection to the engine, and every read on one side is written to the other
as it came: one ``data_received`` and one ``transport.write`` per chunk, no HTTP parsing, no key check, no
accounting. No relay written on Python's event loop does less per chunk, so its CPU per chunk beside nginx's, in
the same run, says how near nginx a Python relay can get at all (issue 35: compiled code for the hot loop is
acceptable "if the measurement shows Python cannot get there"). Flow control: a side whose peer cannot take more
stops being read until it can. It is not a gateway anyone should run.

With ``--watch`` (the ``splice-watch`` peer) the engine side also does, per read, the per-chunk work Hearth's relay
cannot leave out for an OpenAI chat stream, as Hearth does it: httptools reads the answer's framing (one ``on_body``
a chunk), and the body goes through gateway.sse's ``LineEnds``, ``DataEvents`` and ``StreamWatcher`` and
gateway.engine_messages' ``StreamScrubber`` (gateway.relay_stream.StreamedAnswer._out), the read itself still written
on as it came. Its CPU per chunk less the plain splice's is what that Python costs inside a busy relay process, not
in a hot loop (issue 35: the measurement that says whether Python can get there).

Usage: ``python bench/splice_peer.py LISTEN_PORT ENGINE_PORT [--watch]`` (both on 127.0.0.1; runs until killed).
"""

import asyncio
import socket
import sys
import time
from pathlib import Path

import httptools
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the gateway's modules, for --watch
from gateway.engine_messages import StreamScrubber
from gateway.sse import DataEvents, LineEnds, StreamKind, StreamWatcher

WATCH = "--watch" in sys.argv[3:]


class Watch:
    """The engine's answers on one connection as Hearth's relay reads them (module docstring), one at a time."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.on_message_begin()

    def on_message_begin(self) -> None:
        self.ends, self.events = LineEnds(), DataEvents()
        self.watcher, self.scrubber = StreamWatcher(StreamKind.CHAT), StreamScrubber("bench", chat=True)

    def on_body(self, body: bytes) -> None:
        self.watcher.feed(self.events.feed(self.ends.feed(body)))
        self.scrubber.feed(body)
        time.monotonic()  # as the relay notes the client's last bytes


class Side(asyncio.Protocol):
    """One connection of a spliced pair; ``peer`` is the other's once both are open."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: Side | None = None
        self.early: list[bytes] = []  # what came before the peer connected
        self.watch: Watch | None = None  # the engine side's, with --watch

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.early.append(data)
        else:
            if self.watch is not None:
                self.watch.parser.feed_data(data)
            peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class Client(Side):
    def __init__(self, engine_port: int) -> None:
        super().__init__()
        self.engine_port = engine_port
        self.connecting: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, engine = await loop.create_connection(Side, "127.0.0.1", self.engine_port)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        engine.peer, self.peer = self, engine
        engine.watch = Watch() if WATCH else None
        for data in self.early:
            engine.transport.write(data)  # type: ignore[union-attr]
        self.early.clear()


async def serve(listen_port: int, engine_port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Client(engine_port), "127.0.0.1", listen_port, backlog=4096)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), int(sys.argv[2])))
