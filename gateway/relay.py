"""One request's trip to the engine and back.

Streams are relayed as the engine sends them, watched on the side (gateway.sse); a stream that ends
without its terminal event gets an in-stream error. While the engine is silent (a model thinking
before its first token) the client gets an SSE keep-alive every HEARTH_SSE_KEEPALIVE seconds, between
events only: an SSE comment for OpenAI clients, Anthropic's own ``ping`` event for Anthropic clients.
Non-streaming answers are read whole first, so an answer the engine cuts short becomes a 502.
"""

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from enum import StrEnum
from typing import Any

from django.conf import settings

from gateway import errors
from gateway.accounting import Outcome
from gateway.errors import Surface
from gateway.registry import Route
from gateway.routing import Router
from gateway.sse import StreamKind, StreamWatcher, UsageStripper
from gateway.translate import TranslationError, chat_to_message, messages_to_chat
from gateway.translate_stream import ChatStreamToMessages
from gateway.upstream import Answer, Engines, UpstreamBroken, UpstreamUnreachable

Send = Callable[[Mapping[str, Any]], Awaitable[None]]
log = logging.getLogger(__name__)
SSE_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
KEEPALIVE = {Surface.OPENAI: b": keep-alive\n\n", Surface.ANTHROPIC: b'event: ping\ndata: {"type": "ping"}\n\n'}
USAGE_ENDPOINTS = {"/v1/chat/completions", "/v1/completions"}


def ask_for_usage(path: str, request: dict[str, Any]) -> dict[str, Any]:
    """The field that makes a stream end with a usage chunk (OpenAI ``stream_options.include_usage``), so every
    request is accounted; empty when the client asked for it itself. When it is set, the relay strips the
    usage chunk again."""
    if path not in USAGE_ENDPOINTS or not request.get("stream"):
        return {}
    options = request.get("stream_options") or {}
    if options.get("include_usage"):
        return {}
    return {"stream_options": {**options, "include_usage": True}}


# Where each endpoint takes its output-token limit; the first present wins (OpenAI: max_completion_tokens
# over the deprecated max_tokens).
MAX_TOKENS_FIELDS = {
    "/v1/chat/completions": ("max_completion_tokens", "max_tokens"),
    "/v1/completions": ("max_tokens",),
    "/v1/responses": ("max_output_tokens",),
    "/v1/messages": ("max_tokens",),
}


def cap_max_tokens(path: str, request: dict[str, Any], cap: int | None) -> dict[str, int]:
    """The output-token limit field lowered to ``cap`` (set when absent); empty when the request is within it."""
    fields = MAX_TOKENS_FIELDS.get(path)
    if cap is None or fields is None:
        return {}
    name = next((f for f in fields if request.get(f) is not None), fields[0])
    asked = request.get(name)
    if isinstance(asked, int) and asked <= cap:
        return {}
    return {name: cap}


def with_fields(body: bytes, request: dict[str, Any], fields: dict[str, Any]) -> bytes:
    """``body``, the JSON text of ``request``, with ``fields`` set at its top level (in ``request`` too).

    When none of them is in the request yet they are appended to the text, so a long conversation is not
    encoded again (a UTF-8 body only; JSON in UTF-16 or UTF-32 is re-encoded); otherwise the whole request
    is encoded again, as it is whenever a field already present changes."""
    fresh = not any(name in request for name in fields)
    request.update(fields)
    head = body.rstrip()
    if fresh and body.lstrip()[:1] == b"{" and head.endswith(b"}"):
        return head[:-1] + b"," + json.dumps(fields)[1:-1].encode() + b"}"
    return json.dumps(request).encode()


class Translation(StrEnum):
    """How the engine's answer reaches an Anthropic client of an engine without /v1/messages."""

    NONE = "none"
    MESSAGES = "messages"  # chat completions → Anthropic messages (gateway.translate)
    COUNT_TOKENS = "count_tokens"  # the engine's /tokenize count → {"input_tokens"}


def translate_for_chat_engine(path: str, request: dict[str, Any]) -> tuple[str, dict[str, Any], Translation]:
    """(engine path, engine request, translation) for an Anthropic request to an engine that only speaks
    OpenAI's chat API. Raises TranslationError for messages that cannot be translated."""
    chat = messages_to_chat(request)
    if path == "/v1/messages" and (not isinstance(request.get("max_tokens"), int) or request["max_tokens"] < 1):
        raise TranslationError("max_tokens: a positive integer is required, as Anthropic's API requires it.")
    if path == "/v1/messages/count_tokens":
        tokenize = {"model": chat["model"], "messages": chat["messages"], "tools": chat.get("tools")}
        return "/tokenize", {k: v for k, v in tokenize.items() if v is not None}, Translation.COUNT_TOKENS
    return "/v1/chat/completions", chat, Translation.MESSAGES


class Exchange:
    """Relays one request to one of ``route``'s replicas and fills ``outcome`` as it goes."""

    def __init__(self, engines: Engines, route: Route, outcome: Outcome, kind: StreamKind, router: Router) -> None:
        self.engines, self.route, self.outcome, self.kind, self.router = engines, route, outcome, kind, router
        self.started = self.last_sent = time.monotonic()
        self.strip_usage = False
        self.translation = Translation.NONE
        self.at_boundary = True  # the bytes sent so far end between two events
        self.events_out = False  # some of the engine's stream has gone to the client
        self.answered = False  # the answer is complete: a client leaving now cancels nothing
        self._ping_timer: asyncio.TimerHandle | None = None
        self._ping: asyncio.Future[None] | None = None  # a keep-alive being sent

    async def run(self, path: str, body: bytes, prefix: bytes, send: Send) -> None:
        """Try the replicas in the router's order; move on only when one cannot be reached at all."""
        for upstream in self.router.order(self.route, prefix):
            self.router.started(upstream, prefix)
            try:
                try:
                    resp = await self.engines.post(upstream.base_url, path, upstream.engine_api_key, body)
                except UpstreamUnreachable as exc:
                    log.warning("replica %s of %s unreachable: %s", upstream.replica_id, self.outcome.model, exc)
                    continue
                await self._relay(resp, send)
            finally:
                self.router.finished(upstream)
            return
        raise errors.upstream_unreachable(self.route.served_model_name)

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
        if resp.status >= 400:
            body = errors.reshape(resp.status, body, Surface(self.outcome.surface))
        else:
            answer = self._account_whole(body)
            if self.translation == Translation.MESSAGES and answer is not None:
                body = json.dumps(chat_to_message(answer, self.outcome.model)).encode()
            elif self.translation == Translation.COUNT_TOKENS and answer is not None:
                body = json.dumps({"input_tokens": answer.get("count", 0)}).encode()
        content_type = (resp.content_type or "application/json").encode("latin-1")
        await send({"type": "http.response.start", "status": resp.status, "headers": [(b"content-type", content_type)]})
        await send({"type": "http.response.body", "body": body})
        self.answered = True

    def _account_whole(self, body: bytes) -> dict[str, Any] | None:
        """Usage and finish reason from a whole answer; the answer, or None when it is not a JSON object."""
        try:
            answer = json.loads(body)
        except ValueError:
            return None
        if not isinstance(answer, dict):
            return None
        self.outcome.usage = answer.get("usage") or {}
        choices = answer.get("choices") or [{}]
        self.outcome.finish_reason = answer.get("stop_reason") or choices[0].get("finish_reason")
        return answer

    async def _stream(self, resp: Answer, send: Send) -> None:
        content_type = resp.content_type.encode("latin-1")
        await send({"type": "http.response.start", "status": resp.status,
                    "headers": [(b"content-type", content_type), *SSE_HEADERS]})  # fmt: skip
        watcher, stripper = StreamWatcher(self.kind), UsageStripper()
        converter = ChatStreamToMessages(self.outcome.model) if self.translation == Translation.MESSAGES else None
        self._schedule_ping(send)
        try:
            async for chunk in resp.chunks():
                self.last_sent = time.monotonic()
                watcher.feed(chunk)
                if self.outcome.ttft_seconds is None and watcher.token_seen:
                    self.outcome.ttft_seconds = time.monotonic() - self.started
                out = converter.feed(chunk) if converter else stripper.feed(chunk) if self.strip_usage else chunk
                if out:
                    self.events_out = True
                    boundary = out.endswith(b"\n\n")
                    self.at_boundary = False  # until this write is out, a keep-alive could split an event
                    await self._send(send, out)
                    self.at_boundary = boundary
                # A client that leaves once the terminal event went by is done, not cancelled (a converted
                # stream's end is the converter's, sent below).
                self.answered = converter is None and watcher.complete
        except (UpstreamBroken, TimeoutError) as exc:
            log.warning("stream from %s broke: %s", self.route.served_model_name, exc)
        finally:
            self._stop_pings()
            self.outcome.usage = watcher.usage or {}  # recorded even when the client left meanwhile
            self.outcome.finish_reason = watcher.finish_reason
        self._finish_stream(watcher, resp.status)
        tail = stripper.flush() if self.strip_usage else b""
        if converter is not None and not self.outcome.truncated:
            tail = converter.finish()
        # An error event closes a cut stream, but never after [DONE] or the engine's own error event
        # (a translated stream has neither: its client never sees the engine's OpenAI events).
        if self.outcome.truncated and (converter is not None or not (watcher.done or watcher.error)):
            tail += errors.stream_error_event(
                "The engine ended the stream before it finished; the response is incomplete.",
                "upstream_truncated", Surface(self.outcome.surface),
            )  # fmt: skip
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
            surface = Surface(self.outcome.surface)
            # Anthropic's own streams ping only after message_start; an SSE comment is fine anywhere.
            wanted = self.at_boundary and not (surface == Surface.ANTHROPIC and not self.events_out)
            if wanted and (self._ping is None or self._ping.done()):
                self._ping = asyncio.ensure_future(self._send(send, KEEPALIVE[surface]))
        self._schedule_ping(send)

    def _stop_pings(self) -> None:
        if self._ping_timer is not None:
            self._ping_timer.cancel()
        if self._ping is not None:
            self._ping.cancel()

    def _finish_stream(self, watcher: StreamWatcher, status: int) -> None:
        self.outcome.truncated = status == 200 and not watcher.complete
        if self.outcome.truncated:
            log.warning("truncated stream from %s after %.1f s", self.route.served_model_name,
                        time.monotonic() - self.started)  # fmt: skip

    @staticmethod
    async def _send(send: Send, body: bytes) -> None:
        await send({"type": "http.response.body", "body": body, "more_body": True})
