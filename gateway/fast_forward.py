"""A stream's plain content relayed by a native thread, with no Python per chunk (issue 35: the relay's CPU per
chunk against nginx's).

Most of an OpenAI stream is content deltas that every reader of the stream passes on unchanged
(gateway.sse.plain_events). Once such a piece went out (gateway.relay_stream ``_plain``) at a chunk boundary of the
engine's chunked answer, the stream is handed to ``hearth_fast_forward`` (gateway/native/fast_forward.c, built by
``pip install .``): one thread per event loop, with its own epoll, that reads the engine's socket, checks each chunk
with the same test as gateway.sse.plain_events, and sends the content to the client's socket in the same chunked
framing uvicorn would (gateway.asgi_io.BodyWriter), reading paused on both transports meanwhile. It gives the
stream back (``_back``, in the loop, through an eventfd) at the first chunk that is not plain content ([DONE],
usage, a finish, an error, the last chunk), when the engine or the client closes, when the client's socket is
full (the client reads slower than it is sent to: uvicorn's flow control takes over), or after ``silence`` seconds
without a byte from the engine (keep-alives and the idle timeout are Python's). The engine's bytes it did not relay
go through the engine connection's parser as a read would, the client's bytes it did not send through the
transport: the Python path goes on from exactly where the thread stopped, with every guarantee it has.

Without the extension (a checkout run without ``pip install .``) nothing is handed over and every piece goes
through Python, as before.
"""

import asyncio
import importlib.util
import weakref
from collections.abc import Callable
from typing import NamedTuple

BUILT = importlib.util.find_spec("hearth_fast_forward") is not None  # else the Python path relays everything
TAKEN = 6  # Back.reason when ``take_back`` took the stream (hearth_fast_forward.TAKEN)


class Back(NamedTuple):
    """What the thread did with a stream, once it gave it back: ``reason`` (hearth_fast_forward's NOT_PLAIN,
    ENGINE_CLOSED, CLIENT_EVENT, CLIENT_SLOW, SILENT or TAKEN), the engine's bytes it read and did not relay, the
    client's bytes it did not send, the events and body bytes (without chunk framing) it relayed, and the monotonic
    seconds of its last read from the engine and last send to the client."""

    reason: int
    held: bytes
    unsent: bytes
    events: int
    body_bytes: int
    last_read: float
    last_write: float


class Seen(NamedTuple):
    """A stream's progress while the thread relays it: events, body bytes, last read and last send (monotonic s)."""

    events: int
    body_bytes: int
    last_read: float
    last_write: float


class _Lane:
    """The native relay of one event loop, and the streams handed to it (by id)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        from hearth_fast_forward import FastForward  # only once BUILT says it is there

        self.relay = FastForward()
        self.streams: dict[int, Callable[[Back], None]] = {}
        loop.add_reader(self.relay.fileno(), self._exited)

    def _exited(self) -> None:
        for stream_id in self.relay.exited():
            back = self.streams.pop(stream_id, None)
            taken = self.relay.take(stream_id)
            if back is not None and taken is not None:
                back(Back(*taken))


_lanes: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Lane]" = weakref.WeakKeyDictionary()


def _lane() -> _Lane:
    loop = asyncio.get_running_loop()
    lane = _lanes.get(loop)
    if lane is None:
        lane = _lanes[loop] = _Lane(loop)
    return lane


class Handover:
    """One stream handed to the thread: ``engine_fd`` and ``client_fd`` are the sockets it reads and sends on
    while their transports' reading is paused by the caller; ``back`` gets what it did, in the loop, exactly once,
    whether the thread gave the stream back or ``take_back`` took it."""

    def __init__(self, lane: _Lane, stream_id: int) -> None:
        self.lane, self.stream_id = lane, stream_id

    def seen(self) -> Seen | None:
        """The stream's progress so far; None once it was given back."""
        seen = self.lane.relay.peek(self.stream_id)
        return Seen(*seen) if seen is not None else None

    def take_back(self) -> None:
        """The stream back now, wherever the thread is with it (``back`` runs before this returns, if it had not)."""
        back = self.lane.streams.pop(self.stream_id, None)
        taken = self.lane.relay.take(self.stream_id)
        if back is not None and taken is not None:
            back(Back(*taken))


def hand_over(engine_fd: int, client_fd: int, silence: float, back: Callable[[Back], None]) -> Handover | None:
    """The stream between these sockets relayed by the thread from the engine's next byte on (a chunk boundary), or
    None when it cannot be: the extension is not built, or a socket cannot be taken (``back`` is then never called).
    ``silence``: seconds without a byte from the engine before it is given back."""
    if not BUILT:
        return None
    lane = _lane()
    stream_id = lane.relay.add(engine_fd, client_fd, silence)
    if stream_id is None:
        return None
    lane.streams[stream_id] = back
    return Handover(lane, stream_id)
