"""One request's trip to the engine and back: ``Relay`` follows its plan (gateway.relay_plan.RelayPlan, fixed before
the first byte) and notes what happens in one small object (``RelayState``).

Streams are relayed as the engine sends them (line ends made LF, gateway.sse.LineEnds; an OpenAI chat or completions
stream as one ``data:`` line per event, gateway.sse.DataEvents), in the engine connection's read callback while the
client keeps up (``_Stream.push``), watched on the side (gateway.sse); a stream that ends without its terminal event
gets an in-stream error saying why: the engine closed it (``upstream_truncated``), it went silent for
HEARTH_STREAM_IDLE_TIMEOUT seconds (``upstream_timeout``), or, on a translated stream, the engine sent an error (its
own text). From the response head on, while the engine is silent (a model thinking before its first token) the
client gets a keep-alive every HEARTH_SSE_KEEPALIVE seconds, between events only (the interval counts from the last
bytes the client was sent): a blank line for OpenAI clients, Anthropic's own ``ping`` event for Anthropic clients,
before the first event too (the SDKs skip pings wherever they come). A blank line, not an SSE comment: ``vllm bench
serve`` strips each network read before it splits events, so a comment that arrived alone swallowed the rest of its
stream ("Never received a valid chunk"), while an empty line is dropped whole by it, skipped by the SDKs and AIPerf,
and legal SSE. Non-streaming answers are read whole first, so an answer the engine cuts short becomes a 502 and one
the engine is silent on for the idle timeout a 504; an error object answered with a 200 (vLLM's flat ``{"object":
"error", ...}`` or ``{"error": ...}``) is the engine's error, with the status its ``code`` names (else 502), never a
successful answer; a request the engine took is never sent to another replica. What an engine says in an error (its
error answer, an error event in its stream) reaches the client only as gateway.engine_messages leaves it; a
redirect, or a whole answer that is not a JSON object, is a 502. A client that goes away cancels the relay, and with
it the engine's request, at once. A request held for its deployment's wake first (gateway.holding) may have had its
stream's head sent while it waited: the engine's stream continues it, and an answer that cannot (an error the engine
answers whole, a refusal) is raised for gateway.app to end that stream with an in-stream error.
"""

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway import errors
from gateway.answers import AnswerTally, for_request, tally_whole
from gateway.asgi_io import PendingSend, Receive, Send, send_now
from gateway.engine_messages import StreamScrubber
from gateway.errors import StreamCut
from gateway.relay_plan import RelayPlan
from gateway.responses_chat_stream import ChatStreamToResponses
from gateway.rewrite import Translation
from gateway.routing import Router
from gateway.sse import DataEvents, LineEnds, MessageStartUsage, StreamKind, StreamWatcher, UsageStripper
from gateway.translate_stream import ChatStreamToMessages, prompt_estimate
from gateway.upstream import Answer, Engines, UpstreamBroken, UpstreamRefused, UpstreamUnreachable
from gateway.whole_answer import error_status, translated

log = logging.getLogger(__name__)
SSE_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
JSON = b"application/json"


@dataclass(slots=True)
class RelayState:
    """What changes while one request is relayed. The relay alone writes it, but ``client_gone`` (the watch on
    the client); gateway.app records the request from it and the plan."""

    tally: AnswerTally  # what the answer holds (gateway.answers)
    quiet_since: float  # monotonic seconds of the last bytes sent to the client (the engine's, or a keep-alive)
    status: int = 0  # the engine's answer's HTTP status; 0 before its head came
    streamed: int = 0  # bytes of the engine's stream handed to the client (keep-alives and the last bytes aside)
    at_boundary: bool = True  # the bytes sent so far end between two events: a keep-alive may go now
    ttft_seconds: float | None = None  # from the request's arrival until its first generated token went out
    token_chunks: int = 0  # events that carried generated tokens (gateway.sse.StreamWatcher)
    usage: dict[str, Any] = field(default_factory=dict)  # the engine's usage object; {} when it sent none
    finish_reason: str | None = None
    truncated: bool = False  # the stream ended without its terminal event
    answered: bool = False  # the answer is complete: a client leaving now cancels nothing
    client_gone: bool = False  # the client left before its answer was complete
    woke_engine: bool = False  # held for its deployment's wake first (gateway.holding)
    wake_seconds: float | None = None  # how long it was held
    head_sent: bool = False  # a held stream's head went out while it waited: the engine's answer continues it


class Relay:
    """Relays one request (``plan``) to one of its route's replicas and the answer back to the client."""

    def __init__(self, plan: RelayPlan, engines: Engines, router: Router) -> None:
        self.plan, self.engines, self.router = plan, engines, router
        self.state = RelayState(for_request(plan.endpoint, plan.request), quiet_since=time.monotonic())
        # done once the answer is complete, before the client sees its end (the key's concurrency slot given
        # back: gateway.ledger.free_slot); never raises
        self.before_end: Callable[[], Awaitable[None]] | None = None

    async def serve(self, receive: Receive, send: Send, before: Callable[[], Awaitable[None]] | None = None) -> None:
        """``before`` (the wait of a request held for a wake, which may set ``plan``), then ``run``, stopped at
        once when the client disconnects before its answer is complete (the engine's request is aborted with its
        connection). A side task waits for the disconnect, so the relay itself starts without a task switch."""
        relay = asyncio.current_task()
        assert relay is not None  # called from a request's task
        watch = asyncio.ensure_future(self._cancel_when_gone(receive, relay))
        try:
            if before is not None:
                await before()
            await self.run(send)
        except asyncio.CancelledError:
            if not self.state.client_gone:
                raise
            relay.uncancel()
            log.info("client left; upstream request to %s aborted", self.plan.model)
        finally:
            watch.cancel()

    async def run(self, send: Send) -> None:
        """Try the replicas in the router's order; move on only when one could not be reached at all (a
        refused connection, or one closed before any answer). An engine that took the request and stayed
        silent past the idle timeout is a 504, never a second try elsewhere: it may be running it. When every
        replica's address was refused by the address policy, a 502 says so."""
        plan = self.plan
        tried, refused = 0, 0
        for upstream in self.router.order(plan.route, plan.prefix):
            self.router.started(upstream, plan.prefix)
            tried += 1
            try:
                try:
                    answer = await self.engines.post(
                        upstream.base_url,
                        plan.engine_path,
                        upstream.engine_api_key,
                        plan.body,
                        plan.hops,
                        upstream.external,
                    )
                except UpstreamUnreachable as exc:
                    refused += isinstance(exc, UpstreamRefused)
                    log.warning("replica %s of %s unreachable: %s", upstream.replica_id, plan.model, exc)
                    continue
                except TimeoutError:
                    raise errors.upstream_timeout(plan.model) from None
                await self._answer(answer, send)
            finally:
                self.router.finished(upstream)
            return
        if tried and refused == tried:
            raise errors.upstream_refused(plan.model)
        raise errors.upstream_unreachable(plan.model, plan.retry_after)

    async def _answer(self, answer: Answer, send: Send) -> None:
        self.state.status = answer.status
        async with answer:
            if answer.status in (401, 403):  # the engine refused the gateway's own key: not the client's fault
                raise errors.engine_refused(self.plan.model)
            if 300 <= answer.status < 400:
                raise errors.upstream_redirected(self.plan.model, answer.status)
            if answer.mimetype == "text/event-stream" and answer.status < 300:  # an error is read whole
                await self._stream(answer, send)
            else:
                await self._whole(answer, send)

    async def _whole(self, answer: Answer, send: Send) -> None:
        """A whole answer: read to its end, accounted, in the client's API (an error reshaped into the API's
        own whatever the engine called it, a chat answer translated), then sent with its head. On a held stream
        whose head went out, an error is raised for gateway.app to end the stream with."""
        plan = self.plan
        try:
            body = await answer.read()
        except TimeoutError:
            raise errors.upstream_timeout(plan.model) from None
        except UpstreamBroken:
            raise errors.upstream_broke(plan.model) from None
        whole = self._account_whole(body) if answer.status < 400 else None
        failed = answer.status if answer.status >= 400 else error_status(whole)
        if self.state.head_sent:
            raise errors.engine_error(failed, body) if failed else errors.upstream_broke(plan.model)
        if failed and answer.status < 400:
            raise errors.engine_error(failed, body)  # answered in the client's API by gateway.app, and logged so
        content_type = (answer.content_type or "application/json").encode("latin-1")
        if answer.status >= 400:
            body, content_type = errors.reshape(answer.status, body, plan.surface), JSON
        elif plan.translation != Translation.NONE:
            body, content_type = translated(plan, whole), JSON
        elif whole is None:
            raise errors.upstream_not_json(plan.model)
        head = [(b"content-type", content_type), *plan.headers, *(errors.NO_RETRY if answer.status == 508 else ())]
        if self.before_end is not None:
            await self.before_end()
        await send({"type": "http.response.start", "status": answer.status, "headers": head})
        await send({"type": "http.response.body", "body": body})
        self.state.answered = True

    def _account_whole(self, body: bytes) -> dict[str, Any] | None:
        """Usage, finish reason and the tally from a whole answer; the answer, or None when it is not a JSON
        object."""
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(answer, dict):
            return None
        self.state.usage = answer.get("usage") or {}
        self.state.finish_reason = tally_whole(self.state.tally, answer)
        return answer

    async def _stream(self, answer: Answer, send: Send) -> None:
        """A streamed answer, every byte of it sent through ``_Stream``, in this order: the head; the engine's
        pieces as they arrive, with keep-alives while it is silent; the last bytes, with the in-stream error of
        a stream cut short. A client that left ends it at once (the CancelledError goes on to ``serve``)."""
        stream = _Stream(self.plan, self.state, send, answer, self.before_end)
        await stream.head(answer.status, answer.content_type)
        cut = StreamCut.CLOSED
        try:
            async for raw in answer.chunks(stream.push):
                await stream.pull(raw)
            await stream.pull(b"")  # what the last push left
        except TimeoutError as exc:
            cut = StreamCut.IDLE
            log.warning("stream from %s stalled: %s", self.plan.model, exc)
        except UpstreamBroken as exc:
            log.warning("stream from %s broke: %s", self.plan.model, exc)
        except asyncio.CancelledError:
            if self.state.client_gone:
                raise
            # uvicorn cancels what is still open HEARTH_DRAIN_SECONDS after a stop: the stream ends with its
            # error event rather than a silent cut
            cut = StreamCut.RESTART
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        finally:
            stream.stop()  # what the stream held is noted even when the client left meanwhile
        await stream.end(cut, answer.status)

    async def _cancel_when_gone(self, receive: Receive, relay: asyncio.Task[Any]) -> None:
        while (await receive())["type"] != "http.disconnect":  # uvicorn also says so once the answer is complete
            pass
        if not self.state.answered:
            self.state.client_gone = True
            relay.cancel()


class _Stream:
    """One streamed answer on its way to the client: each read's bytes with line ends made LF, watched on the
    side, converted or stripped of usage, sent; keep-alives between them while the engine is silent.

    ``push`` does it in the engine connection's read callback, with no task switch per piece (Answer.chunks'
    sink): it cut the relay's user CPU per chunk from 38–41 to 30–35 µs at 64 streams (bench/README.md). When
    the client reads slower than it is sent to, the send cannot finish there: push stops, and ``pull``, in the
    relay's task, finishes that send and relays the next pieces until the task waits again. An error in push is
    raised by the next pull. Keep-alives come from one timer per stream, not a task. The bytes that end the
    answer for its client wait for ``before_end`` (Relay.before_end), in pull."""

    def __init__(
        self,
        plan: RelayPlan,
        state: RelayState,
        send: Send,
        answer: Answer,
        before_end: Callable[[], Awaitable[None]] | None,
    ) -> None:
        self.plan, self.state, self.send, self.answer, self.before_end = plan, state, send, answer, before_end
        self.ends, self.watcher = LineEnds(), StreamWatcher(plan.kind, state.tally)
        self.events = DataEvents() if plan.kind == StreamKind.CHAT else None
        self.stripper = UsageStripper() if plan.strip_usage else None
        self.converter = _converter(plan)
        what, chat = f"The engine serving {plan.model!r}", plan.kind == StreamKind.CHAT
        self.scrubber = StreamScrubber(what, nest_flat=chat) if self.converter is None else None
        native_messages = self.converter is None and plan.kind == StreamKind.MESSAGES
        self.start_usage = MessageStartUsage() if native_messages else None  # both cache fields in message_start
        self.pending: PendingSend | None = None  # a pushed send waiting on the client
        self.pending_ends_event = False
        self.held = b""  # the bytes that end the answer, held by push for pull to send after before_end
        self.failed: Exception | None = None
        self.keepalive_timer: asyncio.TimerHandle | None = None
        self.keepalive: asyncio.Future[None] | None = None  # a keep-alive being sent

    async def head(self, status: int, content_type: str) -> None:
        """The response head, unless a held stream's went out already (gateway.holding)."""
        if not self.state.head_sent:
            head = [(b"content-type", content_type.encode("latin-1")), *SSE_HEADERS, *self.plan.headers]
            await self.send({"type": "http.response.start", "status": status, "headers": head})
        self._keep_alive_later()

    def push(self, raw: bytes) -> None:
        """A piece, in the engine connection's read callback."""
        try:
            out = self._out(raw)
            if out and self.before_end is not None and self._ends():
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
        if out:
            if self.before_end is not None and self._ends():
                await self._before_end()
            state.streamed += len(out)
            state.at_boundary = False
            await self.send({"type": "http.response.body", "body": out, "more_body": True})
            state.at_boundary = out.endswith(b"\n\n")

    def _ends(self) -> bool:
        """Whether the bytes for the client so far end its answer (its terminal event, the engine's error event,
        or a converted stream's end)."""
        return self.state.answered or (self.converter is not None and self.converter.complete)

    async def _before_end(self) -> None:
        before_end, self.before_end = self.before_end, None
        if before_end is not None:
            await before_end()

    def _out(self, raw: bytes) -> bytes:
        """The client's bytes for ``raw``; b"" when there is nothing to send yet."""
        chunk = self.ends.feed(raw)
        out = self._events(chunk if self.events is None else self.events.feed(chunk))
        if out:
            self.state.quiet_since = time.monotonic()
        return out

    def _events(self, chunk: bytes) -> bytes:
        """The client's bytes for ``chunk``, bytes of the engine's events with LF line ends."""
        state, watcher, converter = self.state, self.watcher, self.converter
        watcher.feed(chunk)
        state.token_chunks = watcher.token_chunks  # live: a note of the request says how far it got (gateway.ledger)
        if state.ttft_seconds is None and watcher.token_seen:
            state.ttft_seconds = time.monotonic() - self.plan.arrived
        # A client that leaves once the terminal event went by is done, not cancelled (a converted stream's
        # end is the converter's, sent by ``end``); so is one that leaves once the engine's error event went by
        # (the openai SDK raises at it and closes): its request is the engine's failure, recorded as cut.
        state.answered = converter is None and (watcher.complete or watcher.error is not None)
        if converter is not None:
            return converter.feed(chunk)
        chunk = self.scrubber.feed(chunk) if self.scrubber is not None else chunk
        chunk = chunk if self.start_usage is None else self.start_usage.feed(chunk)
        return chunk if self.stripper is None else self.stripper.feed(chunk)

    def _keep_alive_later(self) -> None:
        """Look again when the plan's keep-alive interval will have passed since the client's last bytes."""
        delay = max(self.state.quiet_since + self.plan.keepalive_every - time.monotonic(), 0.05)
        self.keepalive_timer = asyncio.get_running_loop().call_later(delay, self._keep_alive)

    def _keep_alive(self) -> None:
        """After the keep-alive interval without bytes for the client, a keep-alive between two events."""
        state = self.state
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
        dropped, and what the side reader saw noted in the state."""
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
        state.truncated = status == 200 and not watcher.complete
        tail = self.scrubber.flush() if self.scrubber is not None else b""
        if self.start_usage is not None:
            tail = self.start_usage.feed(tail) + self.start_usage.flush()
        if self.stripper is not None:
            tail = self.stripper.feed(tail) + self.stripper.flush()
        if converter is not None:
            tail = converter.finish()  # an unterminated last line's events; it ends nothing itself
            state.truncated = status == 200 and not converter.complete
            if converter.error and cut == StreamCut.CLOSED:
                cut = StreamCut.ENGINE_ERROR
        tail = last + tail
        if state.truncated:
            elapsed = time.monotonic() - self.plan.arrived
            log.warning("truncated stream from %s after %.1f s (%s)", self.plan.model, elapsed, cut.value)
        # An error event closes a cut stream, but never after [DONE] or the engine's own error event (a
        # translated stream has neither: its client never sees the engine's OpenAI events).
        if state.truncated and (converter is not None or not (watcher.done or watcher.error)):
            tail += self._error_event(cut)
        await self._before_end()
        await self.send({"type": "http.response.body", "body": tail, "more_body": False})
        state.answered = True

    def _error_event(self, cut: StreamCut) -> bytes:
        """The in-stream error that closes a stream cut short, in the client's API (gateway.errors)."""
        converter = self.converter
        engine_error = converter.error if converter is not None else None
        message = errors.stream_cut_message(cut, self.plan.idle_timeout, engine_error)
        responses = self.plan.kind == StreamKind.RESPONSES or isinstance(converter, ChatStreamToResponses)
        response_id = (converter.response_id if isinstance(converter, ChatStreamToResponses) else "") or ""
        return errors.stream_error_event(
            message, cut.value, self.plan.surface, response_id=response_id if responses else None
        )


def _converter(plan: RelayPlan) -> ChatStreamToMessages | ChatStreamToResponses | None:
    """What turns the engine's chat stream into the client's API, when it speaks another."""
    if plan.translation == Translation.MESSAGES:
        return ChatStreamToMessages(plan.model, prompt_estimate(plan.body))
    if plan.translation == Translation.RESPONSES:
        return ChatStreamToResponses(plan.request, plan.model)
    return None
