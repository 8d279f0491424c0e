"""One streamed answer on its way from the engine to the client (gateway.relay's ``Relay`` hands it each piece).

Streams are relayed as the engine sends them (line ends made LF, gateway.sse.LineEnds; an OpenAI chat or completions
stream as one ``data:`` line per event, gateway.sse.DataEvents), in the engine connection's read callback while the
client keeps up (``StreamedAnswer.push``; a piece of plain content written straight to its connection), watched on the
side (gateway.sse); a stream that ends without its terminal event gets an in-stream error saying why: the engine closed
it (``upstream_truncated``), it went silent for HEARTH_STREAM_IDLE_TIMEOUT seconds (``upstream_timeout``), or, on a
translated stream, the engine sent an error (its own text). From the response head on, while the engine is silent (a
model thinking before its first token) the client gets a keep-alive every HEARTH_SSE_KEEPALIVE seconds, between events
only (the interval counts from the last bytes the client was sent): a blank line for OpenAI clients, Anthropic's own
``ping`` event for Anthropic clients, before the first event too (the SDKs skip pings wherever they come). A blank line,
not an SSE comment: ``vllm bench serve`` strips each network read before it splits events, so a comment that arrived
alone swallowed the rest of its stream ("Never received a valid chunk"), while an empty line is dropped whole by it,
skipped by the SDKs and AIPerf, and legal SSE. What an engine says in an error event reaches the client only as
gateway.engine_messages leaves it.
The engine's last piece goes out with the stream's own last bytes, in one write. Once a stream's content is plain (its
first token went by, whole content-delta events), gateway.fast_forward relays it in C, with no Python per chunk,
until the first piece that is not, a slow client, a close, or a silence as long as the keep-alive interval: this
module then goes on from there.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from gateway import fast_forward
from gateway.asgi_io import BodyWriter, PendingSend, Send, body_writer, send_now
from gateway.engine_messages import StreamScrubber, clean
from gateway.fast_forward import Handover
from gateway.relay_plan import RelayPlan
from gateway.relay_state import RelayState
from gateway.responses_chat_stream import ChatStreamToResponses
from gateway.rewrite import Translation
from gateway.sse import (
    DataEvents,
    LineEnds,
    MessageStartUsage,
    StreamKind,
    StreamWatcher,
    UsageStripper,
    plain_events,
)
from gateway.stream_errors import StreamCut, stream_cut_message, stream_error_event
from gateway.translate_stream import ChatStreamToMessages, prompt_estimate
from gateway.upstream import Answer

log = logging.getLogger(__name__)
SSE_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
MAX_HANDOVERS = 16  # a stream handed to gateway.fast_forward at most this often (each costs ~12 syscalls)


class StreamedAnswer:
    """One streamed answer on its way to the client: each read's bytes with line ends made LF, watched on the
    side, converted or stripped of usage, sent; keep-alives between them while the engine is silent.

    ``push`` does it in the engine connection's read callback, with no task switch per piece (Answer.chunks'
    sink): it cut the relay's user CPU per chunk from 38–41 to 30–35 µs at 64 streams (bench/README.md). Most
    pieces of an OpenAI stream, whole events of content that every reader would pass on as they are, are written
    straight to the client's connection (``_plain``, gateway.asgi_io.BodyWriter), with none of that work: 44 to
    35–38 µs of CPU a chunk at 64 streams (bench/README.md, 2026-12-05). When
    the client reads slower than it is sent to, the send cannot finish there: push stops, and ``pull``, in the
    relay's task, finishes that send and relays the next pieces until the task waits again. An error in push is
    raised by the next pull. Keep-alives come from one timer per stream, not a task. The bytes that end the
    answer for its client wait for ``ending`` (Relay.ending), in pull."""

    def __init__(
        self,
        plan: RelayPlan,
        state: RelayState,
        send: Send,
        answer: Answer,
        ending: Callable[[], Awaitable[None]] | None,
    ) -> None:
        self.plan, self.state, self.send, self.answer, self.ending = plan, state, send, answer, ending
        self.ends, self.watcher = LineEnds(), StreamWatcher(plan.kind, state.tally)
        self.events = DataEvents() if plan.kind == StreamKind.CHAT else None
        self.stripper = UsageStripper() if plan.strip_usage else None
        self.converter = _converter(plan)
        what, chat = f"The engine serving {plan.model!r}", plan.kind == StreamKind.CHAT
        native_messages = self.converter is None and plan.kind == StreamKind.MESSAGES
        responses = plan.kind == StreamKind.RESPONSES
        self.scrubber = StreamScrubber(what, chat, native_messages, responses) if self.converter is None else None
        self.start_usage = MessageStartUsage() if native_messages else None  # both cache fields in message_start
        self.pending: PendingSend | None = None  # a pushed send waiting on the client
        self.pending_ends_event = False
        # bytes for the client not sent yet: the piece that ends the answer, sent by pull after ending, or the
        # engine's last piece, sent by end with the stream's last bytes (one write, not two)
        self.held = b""
        self.failed: Exception | None = None
        self.keepalive_timer: asyncio.TimerHandle | None = None
        self.keepalive: asyncio.Future[None] | None = None  # a keep-alive being sent
        self.writer: BodyWriter | None = None  # pieces written straight to the client (``_plain``)
        self.between_events = True  # the last piece read ended an event: no reader holds part of one
        self.handover: Handover | None = None  # plain content relayed by gateway.fast_forward
        self.handovers = 0
        self.stopped = False  # ``stop`` was called: what the C did not relay is not read on

    async def head(self, status: int, content_type: str) -> None:
        """The response head, unless a held stream's went out already (gateway.holding)."""
        if not self.state.head_sent:
            head = [(b"content-type", content_type.encode("latin-1")), *SSE_HEADERS, *self.plan.head_headers]
            await self.send({"type": "http.response.start", "status": status, "headers": head})
        if self.plan.kind == StreamKind.CHAT and self.converter is None:
            self.writer = body_writer(self.send)
        self._keep_alive_later()

    def push(self, raw: bytes) -> None:
        """A piece, in the engine connection's read callback."""
        if self.writer is not None and self._plain(raw):
            return
        try:
            out = self._out(raw)
            if out and self.answer.complete:  # the stream's last piece: ``end`` sends it with its own last bytes
                self.held = out
            elif out and self.ending is not None and self._ends():
                self.held = out
                self.answer.stop_sink()
            elif out:
                state = self.state
                state.streamed += len(out)
                state.at_boundary = False  # a keep-alive now could split it
                pending = send_now(self.send, {"type": "http.response.body", "body": out, "more_body": True})
                if pending is None:
                    state.at_boundary = out.endswith(b"\n\n")
                else:
                    self.pending, self.pending_ends_event = pending, out.endswith(b"\n\n")
                    self.answer.stop_sink()
        except Exception as exc:  # raised in the relay's task by the next pull
            self.failed = exc
            self.answer.stop_sink()

    async def pull(self, raw: bytes) -> None:
        """A piece, in the relay's task, once what push left is sent."""
        if self.failed is not None:
            raise self.failed
        state = self.state
        if self.pending is not None:
            pending, self.pending = self.pending, None
            await pending
            state.at_boundary = self.pending_ends_event
        out, self.held = self.held + (self._out(raw) if raw else b""), b""
        if out and self.answer.complete:
            self.held = out
        elif out:
            if self.ending is not None and self._ends():
                await self._ending()
            state.streamed += len(out)
            state.at_boundary = False
            await self.send({"type": "http.response.body", "body": out, "more_body": True})
            state.at_boundary = out.endswith(b"\n\n")

    def _plain(self, raw: bytes) -> bool:
        """``raw`` written straight to the client when it is whole content-delta events of an OpenAI stream whose
        first token went by, which every reader of ``_out`` would pass on as it is, counting its events as token
        chunks (gateway.sse.plain_events): most of a stream's pieces, at a fraction of ``_out`` and ``send``'s
        CPU (issue 35). False, having done nothing, for any other piece."""
        watcher = self.watcher
        if not (self.between_events and watcher.token_seen) or watcher.tally.tools or self.answer.complete:
            return False
        events = plain_events(raw)
        if not events or self.writer is None or not self.writer.write(raw):
            return False
        watcher.token_chunks += events
        state = self.state
        state.token_chunks = watcher.token_chunks
        state.streamed += len(raw)
        state.at_boundary = True
        state.quiet_since = time.monotonic()
        if self.handovers < MAX_HANDOVERS:
            self._hand_over(self.writer)
        return True

    def _hand_over(self, writer: BodyWriter) -> None:
        """The stream handed to gateway.fast_forward from the engine's next byte on, when both sides allow
        it: the engine's answer is at a chunk boundary, the client's socket took all that was written, neither is
        TLS, uvicorn is not holding the client's reading paused."""
        engine_fd = self.answer.socket_to_hand_over()
        transport = writer.cycle.transport
        if engine_fd is None or writer.cycle.flow.read_paused or transport.get_write_buffer_size():
            return
        sock = transport.get_extra_info("socket")
        if sock is None or transport.get_extra_info("sslcontext") is not None:
            self.handovers = MAX_HANDOVERS  # a client over TLS: never (not asked again for each piece)
            return
        handover = fast_forward.hand_over(engine_fd, sock.fileno(), self._back)
        if handover is None:
            return
        self.handover, self.handovers = handover, self.handovers + 1
        self.state.live_token_chunks = lambda: self.watcher.token_chunks + handover.seen().events
        transport.pause_reading()  # the client's, for the handover (uvicorn had not paused it)
        self.answer.hand_over(handover)

    def _back(self, back: fast_forward.Back) -> None:
        """The stream given back by the C (gateway.fast_forward.Back): what it relayed counted, what it did not
        send written, both sides read here again; the engine's bytes it did not relay read as they would have been,
        unless the stream is over (``stop`` took it back)."""
        self.handover, self.state.live_token_chunks = None, None
        watcher, state = self.watcher, self.state
        watcher.token_chunks += back.events
        state.token_chunks = watcher.token_chunks
        state.streamed += back.body_bytes
        state.quiet_since = max(state.quiet_since, back.last_write)
        writer = self.writer
        if writer is not None and not writer.cycle.transport.is_closing():
            if back.unsent:
                writer.cycle.transport.write(back.unsent)
            if not writer.cycle.flow.read_paused:  # paused by the handover, not by uvicorn
                writer.cycle.transport.resume_reading()
        self.answer.taken_back(back.held, back.last_read, not self.stopped)

    def _ends(self) -> bool:
        """Whether the bytes for the client so far end its answer (its terminal event, the engine's error event,
        or a converted stream's end)."""
        return self.state.answered or (self.converter is not None and self.converter.complete)

    async def _ending(self) -> None:
        ending, self.ending = self.ending, None
        if ending is not None:
            await ending()

    def _out(self, raw: bytes) -> bytes:
        """The client's bytes for ``raw``; b"" when there is nothing to send yet."""
        self.between_events = raw.endswith(b"\n\n")
        chunk = self.ends.feed(raw)
        out = self._events(chunk if self.events is None else self.events.feed(chunk))
        if out:
            self.state.quiet_since = time.monotonic()
        return out

    def _events(self, chunk: bytes) -> bytes:
        """The client's bytes for ``chunk``, bytes of the engine's events with LF line ends."""
        state, watcher, converter = self.state, self.watcher, self.converter
        if self.scrubber is not None:  # the watcher reads the client's copy: an engine's error cleaned once, one ref
            chunk = self.scrubber.feed(chunk)
        watcher.feed(chunk)
        state.token_chunks = watcher.token_chunks  # live: a note of the request says how far it got (gateway.ledger)
        # TTFT at the first token generated, reasoning included (as vLLM's own histogram and `vllm bench serve`
        # count it): an answer cut while still thinking had none where only text or a tool call counted
        if state.ttft_seconds is None and watcher.token_chunks:
            state.ttft_seconds = time.monotonic() - self.plan.arrived
        # A client that leaves once the terminal event went by is done, not cancelled (a converted stream's
        # end is the converter's, sent by ``end``); so is one that leaves once the engine's error event went by
        # (the openai SDK raises at it and closes): its request is the engine's failure, recorded as cut.
        state.answered = converter is None and (watcher.complete or watcher.error is not None)
        if converter is not None:
            return converter.feed(chunk)
        chunk = chunk if self.start_usage is None else self.start_usage.feed(chunk)
        return chunk if self.stripper is None else self.stripper.feed(chunk)

    def _keep_alive_later(self) -> None:
        """Look again when the plan's keep-alive interval will have passed since the client's last bytes."""
        delay = max(self.state.quiet_since + self.plan.keepalive_every - time.monotonic(), 0.05)
        self.keepalive_timer = asyncio.get_running_loop().call_later(delay, self._keep_alive)

    def _keep_alive(self) -> None:
        """After the keep-alive interval without bytes for the client, a keep-alive between two events. While the C
        relays the stream (gateway.fast_forward), its progress is noted (gateway.ledger's notes read it), and the
        stream taken back for the keep-alive once it has been silent that long."""
        state = self.state
        if self.handover is not None:
            seen = self.handover.seen()
            state.token_chunks = self.watcher.token_chunks + seen.events
            state.quiet_since = max(state.quiet_since, seen.last_write)
            if time.monotonic() - state.quiet_since < self.plan.keepalive_every:
                self._keep_alive_later()
                return
            self.handover.take_back()  # silent: the keep-alive is this path's
        if time.monotonic() - state.quiet_since >= self.plan.keepalive_every:
            state.quiet_since = time.monotonic()
            # never after the stream's terminal event: the engine may close its answer a moment later
            if state.at_boundary and not state.answered and (self.keepalive is None or self.keepalive.done()):
                self.keepalive = asyncio.ensure_future(self._send_more(self.plan.keepalive))
        self._keep_alive_later()

    async def _send_more(self, body: bytes) -> None:
        await self.send({"type": "http.response.body", "body": body, "more_body": True})

    def stop(self) -> None:
        """The engine's stream is over (or cut): no more keep-alives, a pushed send that will never be awaited
        dropped, the stream taken back from gateway.fast_forward, and what the side reader saw noted in
        the state."""
        self.stopped = True
        if self.handover is not None:
            self.handover.take_back()
        if self.pending is not None:
            self.pending.close()
            self.pending = None
        if self.keepalive_timer is not None:
            self.keepalive_timer.cancel()
        if self.keepalive is not None:
            self.keepalive.cancel()
        state, watcher = self.state, self.watcher
        state.usage = watcher.usage or {}
        state.finish_reason, state.token_chunks = watcher.finish_reason, watcher.token_chunks

    async def end(self, cut: StreamCut, status: int) -> None:
        """The stream's last bytes: what was held back, then the in-stream error of a stream cut short (a
        converted stream's end is its converter's)."""
        state, watcher, converter = self.state, self.watcher, self.converter
        last = self._events(self.events.flush()) if self.events is not None else b""  # an event left unended
        tail = self.scrubber.flush() if self.scrubber is not None else b""
        watcher.feed(tail)  # what the scrubber held, unread by the watcher so far
        state.truncated = status == 200 and not watcher.complete
        if self.start_usage is not None:
            tail = self.start_usage.feed(tail) + self.start_usage.flush()
        if self.stripper is not None:
            tail = self.stripper.feed(tail) + self.stripper.flush()
        if converter is not None:
            tail = converter.finish()  # an unterminated last line's events; it ends nothing itself
            state.truncated = status == 200 and not converter.complete
            if converter.error and cut == StreamCut.CLOSED:
                cut = StreamCut.ENGINE_ERROR
        held, self.held = self.held, b""
        state.streamed += len(held)  # the engine's own bytes: a stream whose every piece came with its end is one
        tail = held + last + tail
        if state.truncated:
            elapsed = time.monotonic() - self.plan.arrived
            log.warning("truncated stream from %s after %.1f s (%s)", self.plan.model, elapsed, cut.value)
        # An error event closes a cut stream, but never after [DONE] or the engine's own error event (a
        # translated stream has neither: its client never sees the engine's OpenAI events).
        if state.truncated and (converter is not None or not (watcher.done or watcher.error)):
            tail += self._error_event(cut)
        elif watcher.error is not None:  # the engine's own error event: the client's copy, or cleaned as it would be
            error = watcher.error
            state.error = error if self.scrubber is not None else clean(error, f"an error event from {self.plan.model}")
        await self._ending()
        await self.send({"type": "http.response.body", "body": tail, "more_body": False})
        state.answered = True

    def _error_event(self, cut: StreamCut) -> bytes:
        """The in-stream error that closes a stream cut short, in the client's API (gateway.errors)."""
        converter = self.converter
        engine_error = converter.error if converter is not None else None
        message = stream_cut_message(cut, self.plan.idle_timeout, engine_error)
        self.state.error = message
        responses = self.plan.kind == StreamKind.RESPONSES or isinstance(converter, ChatStreamToResponses)
        response_id = (converter.response_id if isinstance(converter, ChatStreamToResponses) else "") or ""
        return stream_error_event(message, cut.value, self.plan.surface, response_id=response_id if responses else None)


def _converter(plan: RelayPlan) -> ChatStreamToMessages | ChatStreamToResponses | None:
    """What turns the engine's chat stream into the client's API, when it speaks another."""
    if plan.translation == Translation.MESSAGES:
        return ChatStreamToMessages(plan.model, prompt_estimate(plan.body))
    if plan.translation == Translation.RESPONSES:
        return ChatStreamToResponses(plan.request, plan.model)
    return None
