"""A stream's plain content relayed in C, with no Python per chunk (issue 35: the relay's CPU per chunk against
nginx's).

Most of an OpenAI stream is content deltas that every reader of the stream passes on unchanged
(gateway.sse.plain_events). Once such a piece went out (gateway.relay_stream ``_plain``) at a chunk boundary of the
engine's chunked answer, the stream is handed to a ``hearth_fast_forward.Stream`` (gateway/native/fast_forward.c,
compiled by setup.py when ``pip install .`` installs the project): the event loop calls it when the engine's socket
is readable (``loop.add_reader`` on its own dup of the socket, reading paused on both transports meanwhile), and it
reads the engine's chunks, checks each with the same test as gateway.sse.plain_events, and sends the content to the
client's socket in the chunked framing uvicorn would (gateway.asgi_io.BodyWriter). Same thread, same loop: nothing
runs beside the event loop. It gives the stream back at the first chunk that is not plain content ([DONE], usage, a
finish, an error, the last chunk), when the engine or the client closes or the client sends anything, and when the
client's socket is full (the client reads slower than it is sent to: uvicorn's flow control takes over); Python
takes it back (``take_back``) for a keep-alive in a silence, and when the stream ends otherwise. The engine's bytes it
did not relay go through the engine connection's parser as a read would, the client's bytes it did not send through
the transport: the Python path goes on from exactly where the C stopped, with every guarantee it has.

Without the extension (a checkout run without ``pip install .``) nothing is handed over and every piece goes
through Python, as before.
"""

import asyncio
import importlib.util
from collections.abc import Callable
from typing import NamedTuple

BUILT = importlib.util.find_spec("hearth_fast_forward") is not None  # else the Python path relays everything


class Back(NamedTuple):
    """What the C did with a stream, once it is back: ``reason`` (hearth_fast_forward's NOT_PLAIN, ENGINE_CLOSED,
    CLIENT_EVENT, CLIENT_SLOW, or TAKEN), the engine's bytes it read and did not relay, the client's bytes it did not
    send, the events and body bytes (without chunk framing) it relayed, and the monotonic seconds of its last read from
    the engine and last send to the client."""

    reason: int
    held: bytes
    unsent: bytes
    events: int
    body_bytes: int
    last_read: float
    last_write: float


class Seen(NamedTuple):
    """A stream's progress while the C relays it: events, body bytes, last read and last send (monotonic s)."""

    events: int
    body_bytes: int
    last_read: float
    last_write: float


class Handover:
    """One stream relayed by the C from the engine's next byte on: ``back`` gets what it did, exactly once, when
    it gives the stream back or ``take_back`` takes it."""

    def __init__(self, engine_fd: int, client_fd: int, back: Callable[[Back], None]) -> None:
        from hearth_fast_forward import Stream  # only once BUILT says it is there

        self.loop, self.back, self.open = asyncio.get_running_loop(), back, True
        self.stream = Stream(engine_fd, client_fd, self.take_back)
        self.loop.add_reader(self.stream.engine_fd, self.stream.pump)
        self.loop.add_reader(self.stream.client_fd, self.stream.client_event)

    def seen(self) -> Seen:
        """The stream's progress so far (its last figures once it is back)."""
        return Seen(*self.stream.seen())

    def take_back(self) -> None:
        """The stream back now, wherever the C is with it; ``back`` runs before this returns, the first time."""
        if not self.open:
            return
        self.open = False
        self.loop.remove_reader(self.stream.engine_fd)
        self.loop.remove_reader(self.stream.client_fd)
        taken = self.stream.take()
        if taken is not None:
            self.back(Back(*taken))


def hand_over(engine_fd: int, client_fd: int, back: Callable[[Back], None]) -> Handover | None:
    """The stream between these sockets relayed by the C from the engine's next byte on (a chunk boundary), or None
    when it cannot be: the extension is not built, or a socket cannot be taken (``back`` is then never called)."""
    if not BUILT:
        return None
    try:
        return Handover(engine_fd, client_fd, back)
    except OSError:  # a socket closed meanwhile (dup failed): the Python path goes on
        return None
