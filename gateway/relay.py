"""One request's trip to the engine and back.

Streams are relayed as the engine sends them (line ends made LF, gateway.sse.LineEnds), in the engine
connection's read callback while the client keeps up (``_Pieces``), watched on the side (gateway.sse); a
stream that ends without its terminal event gets an in-stream error saying why: the engine closed it
(``upstream_truncated``), it went silent for HEARTH_STREAM_IDLE_TIMEOUT seconds (``upstream_timeout``), or,
on a translated stream, the engine sent an error (its own text). From the response head on, while the engine
is silent (a model thinking before its first token) the client gets a keep-alive every HEARTH_SSE_KEEPALIVE
seconds, between events only: a blank line for OpenAI clients, Anthropic's own ``ping`` event for Anthropic
clients, before the first event too (the SDKs skip pings wherever they come). A blank line, not an SSE
comment: ``vllm bench serve`` strips each network read before it splits events, so a comment that arrived
alone swallowed the rest of its stream ("Never received a valid chunk"), while an empty line is dropped
whole by it, skipped by the SDKs and AIPerf, and legal SSE. Non-streaming answers are read whole first, so
an answer the engine cuts short becomes a 502 and one the engine is silent on for the idle timeout a 504; a
request the engine took is never sent to another replica."""

import asyncio
import json
import logging
import time
from typing import Any

from django.conf import settings

from gateway import errors
from gateway.accounting import Outcome
from gateway.answers import AnswerTally, tally_whole
from gateway.asgi_io import PendingSend, Send, send_now
from gateway.errors import StreamCut, Surface
from gateway.registry import Route
from gateway.responses_chat import chat_to_response
from gateway.responses_chat_stream import ChatStreamToResponses
from gateway.rewrite import Translation
from gateway.routing import Router
from gateway.sse import LineEnds, StreamKind, StreamWatcher, UsageStripper
from gateway.translate import chat_to_message
from gateway.translate_stream import ChatStreamToMessages
from gateway.upstream import Answer, Engines, UpstreamBroken, UpstreamUnreachable

Converter = ChatStreamToMessages | ChatStreamToResponses
log = logging.getLogger(__name__)
SSE_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
KEEPALIVE = {Surface.OPENAI: b"\n", Surface.ANTHROPIC: b'event: ping\ndata: {"type": "ping"}\n\n'}
JSON = b"application/json"


class Exchange:
    """Relays one request to one of ``route``'s replicas and fills ``outcome`` as it goes.

    ``request`` is the client's parsed request (a Responses translation echoes it), ``tally`` collects what
    the answer holds (gateway.answers), ``headers`` are added to the response head."""

    def __init__(self, engines: Engines, route: Route, outcome: Outcome, kind: StreamKind, router: Router) -> None:
        self.engines, self.route, self.outcome, self.kind, self.router = engines, route, outcome, kind, router
        self.started = self.last_sent = time.monotonic()
        self.strip_usage = False
        self.translation = Translation.NONE
        self.request: dict[str, Any] = {}
        self.tally = AnswerTally()
        self.headers: list[tuple[bytes, bytes]] = []
        self.token_chunks = 0  # events that carried generated tokens (gateway.sse.StreamWatcher)
        self.at_boundary = True  # the bytes sent so far end between two events
        self.events_out = False  # some of the engine's stream has gone to the client
        self.answered = False  # the answer is complete: a client leaving now cancels nothing
        self._ping_timer: asyncio.TimerHandle | None = None
        self._ping: asyncio.Future[None] | None = None  # a keep-alive being sent

    async def run(self, path: str, body: bytes, prefix: bytes, send: Send) -> None:
        """Try the replicas in the router's order; move on only when one could not be reached at all (a
        refused connection, or one closed before any answer). An engine that took the request and stayed
        silent past the idle timeout is a 504, never a second try elsewhere: it may be running it."""
        for upstream in self.router.order(self.route, prefix):
            self.router.started(upstream, prefix)
            try:
                try:
                    resp = await self.engines.post(upstream.base_url, path, upstream.engine_api_key, body)
                except UpstreamUnreachable as exc:
                    log.warning("replica %s of %s unreachable: %s", upstream.replica_id, self.outcome.model, exc)
                    continue
                except TimeoutError:
                    raise errors.upstream_timeout(self.route.served_model_name) from None
                await self._relay(resp, send)
            finally:
                self.router.finished(upstream)
            return
        raise errors.upstream_unreachable(self.route.served_model_name, max(1, int(settings.HEARTH_RECONCILE_INTERVAL)))

    async def _relay(self, resp: Answer, send: Send) -> None:
        self.outcome.status = resp.status
        async with resp:
            if resp.status in (401, 403):  # the engine refused the gateway's own key: not the client's fault
                raise errors.engine_refused(self.route.served_model_name)
            if resp.mimetype == "text/event-stream":
                await self._stream(resp, send)
            else:
                await self._whole(resp, send)

    async def _whole(self, resp: Answer, send: Send) -> None:
        try:
            body = await resp.read()
        except TimeoutError:
            raise errors.upstream_timeout(self.route.served_model_name) from None
        except UpstreamBroken:
            raise errors.upstream_broke(self.route.served_model_name) from None
        content_type = (resp.content_type or "application/json").encode("latin-1")
        surface = Surface(self.outcome.surface)
        if resp.status >= 400:  # reshaped into the API's own error, whatever the engine called it
            body, content_type = errors.reshape(resp.status, body, surface), JSON
        elif self.translation != Translation.NONE:
            body = self._translated(self._account_whole(body))
            content_type = JSON
        else:
            self._account_whole(body)
        await send({"type": "http.response.start", "status": resp.status,
                    "headers": [(b"content-type", content_type), *self.headers]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})
        self.answered = True

    def _translated(self, answer: dict[str, Any] | None) -> bytes:
        """A whole chat answer (or /tokenize count) in the client's API. Raises GatewayError 502 for an
        answer that is not what the engine should have sent (never a silent empty answer or a count of 0)."""
        name = self.route.served_model_name
        if answer is None:
            raise errors.GatewayError(502, f"The engine serving '{name}' answered something that is not JSON.",
                                      type="server_error", code="upstream_invalid", recorded=True)  # fmt: skip
        if self.translation == Translation.COUNT_TOKENS:
            count = answer.get("count")
            if not isinstance(count, int) or isinstance(count, bool):
                raise errors.GatewayError(502, f"The engine serving '{name}' did not count the tokens (its "
                                          "/tokenize answer has no count).", type="server_error",
                                          code="upstream_invalid", recorded=True)  # fmt: skip
            return json.dumps({"input_tokens": count}).encode()
        if self.translation == Translation.RESPONSES:
            return json.dumps(chat_to_response(answer, self.request, self.outcome.model)).encode()
        return json.dumps(chat_to_message(answer, self.outcome.model)).encode()

    def _account_whole(self, body: bytes) -> dict[str, Any] | None:
        """Usage, finish reason and the tally from a whole answer; the answer, or None when it is not a JSON
        object."""
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(answer, dict):
            return None
        self.outcome.usage = answer.get("usage") or {}
        self.outcome.finish_reason = tally_whole(self.tally, answer)
        return answer

    def _converter(self) -> Converter | None:
        if self.translation == Translation.MESSAGES:
            return ChatStreamToMessages(self.outcome.model)
        if self.translation == Translation.RESPONSES:
            return ChatStreamToResponses(self.request, self.outcome.model)
        return None

    async def _stream(self, resp: Answer, send: Send) -> None:
        content_type = resp.content_type.encode("latin-1")
        await send({"type": "http.response.start", "status": resp.status,
                    "headers": [(b"content-type", content_type), *SSE_HEADERS, *self.headers]})  # fmt: skip
        watcher, stripper = StreamWatcher(self.kind, self.tally), UsageStripper()
        converter, cut = self._converter(), StreamCut.CLOSED
        pieces = _Pieces(self, send, resp, watcher, stripper, converter)
        self._schedule_ping(send)
        try:
            async for raw in resp.chunks(pieces.push):
                await pieces.pull(raw)
            await pieces.pull(b"")  # what the last push left
        except TimeoutError as exc:
            cut = StreamCut.IDLE
            log.warning("stream from %s stalled: %s", self.route.served_model_name, exc)
        except UpstreamBroken as exc:
            log.warning("stream from %s broke: %s", self.route.served_model_name, exc)
        except asyncio.CancelledError:
            if self.outcome.client_cancelled:
                raise
            # uvicorn cancels what is still open HEARTH_DRAIN_SECONDS after a stop: the stream ends with its
            # error event rather than a silent cut
            cut = StreamCut.RESTART
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        finally:
            pieces.close()
            self._stop_pings()
            self.outcome.usage = watcher.usage or {}  # recorded even when the client left meanwhile
            self.outcome.finish_reason = watcher.finish_reason
            self.token_chunks = watcher.token_chunks
        await self._end_stream(send, watcher, converter, stripper, cut, resp.status)

    async def _end_stream(
        self, send: Send, watcher: StreamWatcher, converter: Converter | None, stripper: UsageStripper,
        cut: StreamCut, status: int,
    ) -> None:  # fmt: skip
        """The stream's last bytes: what was held back, or the error event of a stream cut short."""
        self.outcome.truncated = status == 200 and not watcher.complete
        tail = stripper.flush() if self.strip_usage else b""
        if converter is not None:
            tail = converter.finish()  # an unterminated last line's events; it ends nothing itself
            self.outcome.truncated = status == 200 and not converter.complete
            if converter.error and cut == StreamCut.CLOSED:
                cut = StreamCut.ENGINE_ERROR
        if self.outcome.truncated:
            log.warning("truncated stream from %s after %.1f s (%s)", self.route.served_model_name,
                        time.monotonic() - self.started, cut.value)  # fmt: skip
        # An error event closes a cut stream, but never after [DONE] or the engine's own error event (a
        # translated stream has neither: its client never sees the engine's OpenAI events).
        if self.outcome.truncated and (converter is not None or not (watcher.done or watcher.error)):
            engine_error = converter.error if converter is not None else None
            message = errors.stream_cut_message(cut, settings.HEARTH_STREAM_IDLE_TIMEOUT, engine_error)
            responses = self.kind == StreamKind.RESPONSES or isinstance(converter, ChatStreamToResponses)
            response_id = (converter.response_id if isinstance(converter, ChatStreamToResponses) else "") or ""
            tail += errors.stream_error_event(message, cut.value, Surface(self.outcome.surface),
                                              response_id=response_id if responses else None)  # fmt: skip
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        self.answered = True

    def _schedule_ping(self, send: Send) -> None:
        """Look again when HEARTH_SSE_KEEPALIVE seconds will have passed since the engine's last byte.

        One timer per stream rather than a task: a task is started only to send a keep-alive."""
        delay = max(self.last_sent + settings.HEARTH_SSE_KEEPALIVE - time.monotonic(), 0.05)
        self._ping_timer = asyncio.get_running_loop().call_later(delay, self._ping_if_silent, send)

    def _ping_if_silent(self, send: Send) -> None:
        """After HEARTH_SSE_KEEPALIVE seconds of engine silence, a keep-alive between two events."""
        if time.monotonic() - self.last_sent >= settings.HEARTH_SSE_KEEPALIVE:
            self.last_sent = time.monotonic()
            # never after the stream's terminal event: the engine may close its answer a moment later
            if self.at_boundary and not self.answered and (self._ping is None or self._ping.done()):
                self._ping = asyncio.ensure_future(self._send(send, KEEPALIVE[Surface(self.outcome.surface)]))
        self._schedule_ping(send)

    def _stop_pings(self) -> None:
        if self._ping_timer is not None:
            self._ping_timer.cancel()
        if self._ping is not None:
            self._ping.cancel()

    @staticmethod
    async def _send(send: Send, body: bytes) -> None:
        await send({"type": "http.response.body", "body": body, "more_body": True})


class _Pieces:
    """One stream's pieces on their way from the engine to the client: each read's bytes with line ends made
    LF, watched on the side, converted or stripped of usage, sent.

    ``push`` does it in the engine connection's read callback, with no task switch per piece (Answer.chunks'
    sink): it cut the relay's user CPU per chunk from 38–41 to 30–35 µs at 64 streams (bench/README.md). When
    the client reads slower than it is sent to, the send cannot finish there: push stops, and ``pull``, in the
    relay's task, finishes that send and relays the next pieces until the task waits again. An error in push is
    raised by the next pull."""

    def __init__(
        self, exchange: Exchange, send: Send, answer: Answer, watcher: StreamWatcher, stripper: UsageStripper,
        converter: Converter | None,
    ) -> None:  # fmt: skip
        self.exchange, self.send, self.answer = exchange, send, answer
        self.watcher, self.stripper, self.converter = watcher, stripper, converter
        self.ends = LineEnds()
        self.rest: PendingSend | None = None  # a pushed send waiting on the client
        self.rest_ends_event = False
        self.failed: Exception | None = None

    def _out(self, raw: bytes) -> bytes:
        """The client's bytes for ``raw``; b"" when there is nothing to send yet."""
        exchange, watcher, converter = self.exchange, self.watcher, self.converter
        exchange.last_sent = time.monotonic()
        chunk = self.ends.feed(raw)
        watcher.feed(chunk)
        if exchange.outcome.ttft_seconds is None and watcher.token_seen:
            exchange.outcome.ttft_seconds = time.monotonic() - exchange.started
        # A client that leaves once the terminal event went by is done, not cancelled (a converted stream's
        # end is the converter's, sent by _end_stream).
        exchange.answered = converter is None and watcher.complete
        if converter is not None:
            return converter.feed(chunk)
        return self.stripper.feed(chunk) if exchange.strip_usage else chunk

    def push(self, raw: bytes) -> None:
        try:
            out = self._out(raw)
            if out:
                self.exchange.events_out, self.exchange.at_boundary = True, False  # a keep-alive could split it
                rest = send_now(self.send, {"type": "http.response.body", "body": out, "more_body": True})
                if rest is None:
                    self.exchange.at_boundary = out.endswith(b"\n\n")
                else:
                    self.rest, self.rest_ends_event = rest, out.endswith(b"\n\n")
                    self.answer.stop_sink()
        except Exception as exc:  # raised in the relay's task by the next pull
            self.failed = exc
            self.answer.stop_sink()

    async def pull(self, raw: bytes) -> None:
        if self.failed is not None:
            raise self.failed
        if self.rest is not None:
            rest, self.rest = self.rest, None
            await rest
            self.exchange.at_boundary = self.rest_ends_event
        out = self._out(raw) if raw else b""
        if out:
            self.exchange.events_out, self.exchange.at_boundary = True, False
            await self.send({"type": "http.response.body", "body": out, "more_body": True})
            self.exchange.at_boundary = out.endswith(b"\n\n")

    def close(self) -> None:
        """A pushed send that will never be awaited (the stream was cut meanwhile) is dropped."""
        if self.rest is not None:
            self.rest.close()
            self.rest = None
