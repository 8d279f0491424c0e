"""A side-copy reader of an engine's event stream, for accounting and for spotting truncated streams.

The relay forwards bytes untouched; this reader only watches them. It tolerates events split across
reads, ``data:`` with or without a space, and CRLF line ends (the SSE spec,
https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation).

A stream is complete only when it ends as its API says it must:
- OpenAI chat and completions: a ``finish_reason``, then ``data: [DONE]``;
- OpenAI Responses: a ``response.completed``, ``response.incomplete`` or ``response.failed`` event;
- Anthropic Messages: a ``message_stop`` event.
"""

import json
from enum import StrEnum
from typing import Any


class StreamKind(StrEnum):
    CHAT = "chat"  # /v1/chat/completions and /v1/completions
    RESPONSES = "responses"
    MESSAGES = "messages"


RESPONSES_TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


class StreamWatcher:
    """Feed it the stream's bytes; it records the finish reason, usage, and whether the stream ended properly."""

    def __init__(self, kind: StreamKind = StreamKind.CHAT) -> None:
        self.kind = kind
        self._pending = b""
        self.done = False
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.error: str | None = None
        self.token_seen = False  # a generated token (text, tool-call or JSON delta) has gone by

    def feed(self, chunk: bytes) -> None:
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            self._line(line.rstrip(b"\r"))

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = self.kind == StreamKind.CHAT
            return
        if self.kind == StreamKind.CHAT and self.token_seen and _plain_chat_chunk(data):
            return
        try:
            event = json.loads(data)
        except ValueError:
            return
        if isinstance(event, dict):
            self._event(event)

    def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if "error" in event:
            self.error = str(event["error"])
        if self.kind == StreamKind.CHAT:
            for choice in event.get("choices") or []:
                self.finish_reason = choice.get("finish_reason") or self.finish_reason
                delta = choice.get("delta") or {}
                self.token_seen |= bool(delta.get("content") or delta.get("tool_calls") or choice.get("text"))
            self.usage = event.get("usage") or self.usage
        elif self.kind == StreamKind.RESPONSES:
            self.token_seen |= kind == "response.output_text.delta"
            if kind in RESPONSES_TERMINAL:
                self.done, self.finish_reason = True, kind
                self.usage = (event.get("response") or {}).get("usage")
        elif self.kind == StreamKind.MESSAGES:
            self.token_seen |= kind == "content_block_delta"
            if kind == "message_start":
                self.usage = dict((event.get("message") or {}).get("usage") or {})
            elif kind == "message_delta":
                self.finish_reason = (event.get("delta") or {}).get("stop_reason")
                self.usage = {**(self.usage or {}), **(event.get("usage") or {})}
            self.done = self.done or kind == "message_stop"

    @property
    def complete(self) -> bool:
        """True when the stream ended as its API's protocol says it must (see the module docstring)."""
        if self.kind == StreamKind.CHAT:
            return self.done and self.finish_reason is not None
        return self.done


class UsageStripper:
    """Forwards whole events, dropping the usage-only chunk (``"choices": []`` with ``usage``) that the
    gateway asked the engine for on behalf of a client that did not ask for it."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> bytes:
        """The complete events in what has arrived so far, minus the usage chunk; a partial event waits."""
        if not self._buffer and chunk.endswith(b"\n\n") and b"\r" not in chunk and not _may_hold_usage(chunk):
            return chunk  # whole events, none of them the usage chunk: most reads, passed on without a copy
        self._buffer += chunk
        out = bytearray()
        while True:
            end = _event_end(self._buffer)
            if end < 0:
                return bytes(out)
            event, self._buffer = self._buffer[:end], self._buffer[end:]
            if not _is_usage_only(event):
                out += event

    def flush(self) -> bytes:
        rest, self._buffer = self._buffer, b""
        return rest


def _plain_chat_chunk(data: bytes) -> bool:
    """True when a chat chunk's JSON has no ``usage``, no ``error`` and only null ``finish_reason``s, read
    from its bytes without parsing it: most chunks of a stream, whose parsing was ~10 % of the gateway's
    CPU at 64 streams (py-spy).

    Exact for JSON without ``\\u`` escapes: a key is then spelled literally, and a quote inside a string is
    escaped, so ``"finish_reason":null`` occurs only as a key with a null value. Chunks with ``\\u``
    escapes, or other spacing around the colon, are parsed."""
    if b"\\u" in data or b'"usage"' in data or b'"error"' in data:
        return False
    nulls = data.count(b'"finish_reason":null') + data.count(b'"finish_reason": null')
    return data.count(b'"finish_reason"') == nulls


def _event_end(buffer: bytes) -> int:
    """Index just past the first blank line that ends an event, or -1."""
    lf = buffer.find(b"\n\n")
    if b"\r" not in buffer:  # the common case: one search
        return lf + 2 if lf >= 0 else -1
    ends = [i + len(sep) for sep, i in ((b"\n\n", lf), (b"\r\n\r\n", buffer.find(b"\r\n\r\n"))) if i >= 0]
    return min(ends) if ends else -1


def _may_hold_usage(data: bytes) -> bool:
    return b'"usage"' in data or b"\\u" in data  # the key, spelled literally or with an escape


def _is_usage_only(event: bytes) -> bool:
    if not _may_hold_usage(event):
        return False
    for line in event.splitlines():
        if line.startswith(b"data:"):
            try:
                data = json.loads(line[5:])
            except ValueError:
                return False
            return isinstance(data, dict) and data.get("choices") == [] and bool(data.get("usage"))
    return False
