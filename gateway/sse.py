"""A side-copy reader of an engine's event stream, for accounting and for spotting truncated streams.

The relay forwards the engine's bytes with their line ends made LF (``LineEnds``); this reader only watches
them. It tolerates events split across reads, ``data:`` with or without a space, and the three line ends
the SSE spec allows, CRLF, LF and a bare CR, even when a CRLF is split across two reads
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation).

``DataEvents`` passes an OpenAI chat stream on as the openai SDK can read it: one ``data:`` line per event, no
other field (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation allows
``id:``, ``retry:``, ``event:`` and comments, and several ``data:`` lines joined by newlines).
``MessageStartUsage`` gives an engine's own Anthropic stream the two cache counts its ``message_start`` lacks.

A stream is complete only when it ends as its API says it must:
- OpenAI chat and completions: a ``finish_reason``, then ``data: [DONE]``;
- OpenAI Responses: a ``response.completed``, ``response.incomplete`` or ``response.failed`` event;
- Anthropic Messages: a ``message_stop`` event.
"""

import json
from enum import StrEnum
from typing import Any

from gateway.answers import AnswerTally, responses_finish, responses_item


class StreamKind(StrEnum):
    CHAT = "chat"  # /v1/chat/completions and /v1/completions
    RESPONSES = "responses"
    MESSAGES = "messages"


RESPONSES_TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


class LineEnds:
    """Turns an event stream's line ends (CRLF, LF or a bare CR) into LF, across reads.

    A read that ends in CR may be followed by one that starts with the LF of the same CRLF: that LF is
    dropped. Reads without a CR (and not right after one) are passed on as they are, without a copy.
    """

    def __init__(self) -> None:
        self._after_cr = False

    def feed(self, chunk: bytes) -> bytes:
        if not self._after_cr and chunk.find(b"\r") < 0:  # find, not ``in``: ~3× faster on bytes
            return chunk
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._after_cr = chunk.endswith(b"\r")
        return chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


class StreamWatcher:
    """Feed it the stream's bytes; it records the finish reason, usage, and whether the stream ended properly,
    and feeds ``tally`` (gateway.answers) what the answer holds. ``token_chunks`` counts the events that
    carried generated tokens (text, tool-call arguments or reasoning): each carries at least one, so it is
    a lower bound on the tokens sent when the engine's own usage never came (a client that left)."""

    def __init__(self, kind: StreamKind = StreamKind.CHAT, tally: AnswerTally | None = None) -> None:
        self.kind = kind
        self.tally = tally or AnswerTally()
        self._ends = LineEnds()
        self._pending = b""
        self.done = False
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.error: str | None = None
        self.token_seen = False  # a generated token (text, tool-call or JSON delta) has gone by
        self.token_chunks = 0

    def feed(self, chunk: bytes) -> None:
        data = self._pending + self._ends.feed(chunk)
        end = data.rfind(b"\n")
        if end < 0:
            self._pending = data
            return
        lines, self._pending = data[:end], data[end + 1 :]
        if self.kind == StreamKind.CHAT and self.token_seen and not self.tally.tools and _plain(lines):
            # content deltas only, read from their bytes in one scan: each data: line is one event
            self.token_chunks += lines.startswith(b"data:") + lines.count(b"\ndata:")
            return
        for line in lines.split(b"\n"):
            self._line(line)

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = self.kind == StreamKind.CHAT
            return
        if self.kind == StreamKind.CHAT and self.token_seen and not self.tally.tools and _plain(data):
            self.token_chunks += 1  # a content delta, read from its bytes
            return
        try:
            event = json.loads(data)
        except ValueError:
            return
        if isinstance(event, dict):
            self._event(event)

    def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if "error" in event or event.get("object") == "error":
            self.error = error_text(event)
        if self.kind == StreamKind.CHAT:
            self._chat(event)
        elif self.kind == StreamKind.RESPONSES:
            self._responses(kind, event)
        elif self.kind == StreamKind.MESSAGES:
            self._messages(kind, event)

    def _chat(self, event: dict[str, Any]) -> None:
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            delta = choice.get("delta") or {}
            visible = bool(delta.get("content") or delta.get("tool_calls") or choice.get("text"))
            self.token_seen |= visible
            self.token_chunks += visible or bool(delta.get("reasoning") or delta.get("reasoning_content"))
            if choice.get("index", 0) == 0:
                self.tally.chat_delta(delta)
                if isinstance(choice.get("text"), str) and choice["text"]:
                    self.tally.add_text(choice["text"])
        self.usage = event.get("usage") or self.usage
        self.tally.usage(self.usage)

    def _responses(self, kind: Any, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        if kind == "response.output_text.delta" and isinstance(delta, str):
            self.tally.add_text(delta)
        elif kind == "response.function_call_arguments.delta":
            self.tally.add_arguments(event.get("output_index"), delta)
        elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            self.tally.reasoning_pieces += 1
        elif kind == "response.output_item.added" and (event.get("item") or {}).get("type") == "function_call":
            self.tally.add_arguments(event.get("output_index"), "")
        visible = kind in ("response.output_text.delta", "response.function_call_arguments.delta")
        self.token_seen |= visible
        self.token_chunks += visible or kind == "response.reasoning_text.delta"
        if kind in RESPONSES_TERMINAL:
            response = event.get("response") or {}
            self.done, self.finish_reason = True, responses_finish(response) or str(kind)
            self.usage = response.get("usage")
            self.tally.usage(self.usage)
            if not self.tally.content:  # a stream whose output came only in the final response
                for index, item in enumerate(response.get("output") or []):
                    responses_item(self.tally, index, item)

    def _messages(self, kind: Any, event: dict[str, Any]) -> None:
        self.token_seen |= kind == "content_block_delta"
        if kind == "message_start":
            self.usage = dict((event.get("message") or {}).get("usage") or {})
        elif kind == "content_block_start" and (event.get("content_block") or {}).get("type") == "tool_use":
            self.tally.add_arguments(event.get("index"), "")
        elif kind == "content_block_delta":
            self.token_chunks += 1
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                self.tally.add_text(str(delta["text"]))
            elif delta.get("type") == "input_json_delta":
                self.tally.add_arguments(event.get("index"), delta.get("partial_json"))
            elif delta.get("type") == "thinking_delta":
                self.tally.reasoning_pieces += 1
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


class DataEvents:
    """Passes an OpenAI chat or completions stream on with each event as one ``data:`` line and a blank line.

    What the openai SDK cannot read is dropped: its decoder (openai/_streaming.py ``SSEDecoder``) makes an event of
    every blank line after an ``id:``, ``retry:`` or ``event:`` field, whose empty data it then fails to parse as
    JSON, and it keeps the last ``id:`` for every event after it, so one ``id:`` line broke the rest of the stream.
    Events without data and comments go; an event's ``data:`` lines are joined with the newline the SSE spec joins
    them with, which in the JSON these streams carry is whitespace, sent as a space so the event is one line.
    Feed it bytes with LF line ends (``LineEnds``); most reads are whole events of one ``data:`` line each and are
    passed on without a copy.
    """

    def __init__(self) -> None:
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        """The whole events in what has arrived so far, as the class says; b"" while none is complete."""
        if not self._held and _data_events(chunk):
            return chunk
        data = self._held + chunk
        end = data.rfind(b"\n\n")
        if end < 0:
            self._held = data
            return b""
        self._held = data[end + 2 :]
        return b"".join(_data_event(block) for block in data[:end].split(b"\n\n"))

    def flush(self) -> bytes:
        """At the end of the stream: an event its engine did not end with a blank line, ended."""
        held, self._held = self._held, b""
        return _data_event(held.rstrip(b"\n"))


def _data_events(chunk: bytes) -> int:
    """How many events ``chunk`` is when it is whole events of one ``data:`` line each, else 0: every newline is
    either the last two or one of a ``\\n\\ndata:`` pair (the pattern cannot overlap itself), so no other line is
    there. Two scans."""
    if not (chunk.startswith(b"data:") and chunk.endswith(b"\n\n")):
        return 0
    events = chunk.count(b"\n\ndata:") + 1
    return events if chunk.count(b"\n") == 2 * events else 0


def _data_event(block: bytes) -> bytes:
    """One event's lines (no blank line among them) as ``data: DATA\\n\\n``; b"" when it has no data."""
    data = [line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:")]
    return b"data: " + b" ".join(data) + b"\n\n" if data else b""


def error_text(event: dict[str, Any]) -> str:
    """The message of an engine's error event: ``{"error": {"message": ...}}``, ``{"error": "..."}``, or vLLM's flat
    ``{"object": "error", "message": ...}`` (its ``ErrorResponse`` before 0.10, sent whole mid-stream)."""
    error = event.get("error")
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if error is None and event.get("object") == "error":
        return str(event.get("message") or "The engine failed without a message.")
    return str(error)


CACHE_FIELDS = ("cache_creation_input_tokens", "cache_read_input_tokens")


class MessageStartUsage:
    """Passes an Anthropic Messages stream on with both cache fields in ``message_start.message.usage`` (0 where the
    engine left them out: vLLM 0.32's own /v1/messages omits them unless prompt-token details are on, its
    vllm/entrypoints/anthropic/serving.py ``_build_anthropic_usage``), as Anthropic's API always sends them.
    ``message_start`` is a Messages stream's first event: that event is held until whole, every read after it
    passed on as it is. Feed it bytes with LF line ends (``LineEnds``)."""

    def __init__(self) -> None:
        self._held: bytes | None = b""  # None once the first event went by

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to pass on for what has arrived so far; b"" while the first event is incomplete."""
        if self._held is None:
            return chunk
        data = self._held + chunk
        end = data.find(b"\n\n", len(data) - len(data.lstrip(b"\n")))
        if end < 0:
            self._held = data
            return b""
        self._held = None
        return _with_cache_fields(data[:end]) + data[end:]

    def flush(self) -> bytes:
        """What is held when the stream ends (a first event its engine never finished)."""
        held, self._held = self._held or b"", None
        return held


def _with_cache_fields(event: bytes) -> bytes:
    """``event`` (its lines) with CACHE_FIELDS set to 0 where a ``message_start``'s usage lacks them."""
    lines = event.split(b"\n")
    for at, line in enumerate(lines):
        if not line.startswith(b"data:"):
            continue
        try:
            data = json.loads(line[5:])
            usage = data["message"]["usage"] if data["type"] == "message_start" else None
        except (ValueError, KeyError, TypeError):
            return event
        if not isinstance(usage, dict) or all(name in usage for name in CACHE_FIELDS):
            return event
        for name in CACHE_FIELDS:
            usage.setdefault(name, 0)
        lines[at] = b"data: " + json.dumps(data, separators=(",", ":")).encode()
    return b"\n".join(lines)


class UsageStripper:
    """Forwards whole events, dropping the usage-only chunk (``"choices": []`` with ``usage``) that the
    gateway asked the engine for on behalf of a client that did not ask for it."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> bytes:
        """The complete events in what has arrived so far, minus the usage chunk; a partial event waits.

        ``chunk`` has LF line ends (LineEnds)."""
        if not self._buffer and chunk.endswith(b"\n\n") and not _may_hold_usage(chunk):
            return chunk  # whole events, none of them the usage chunk: most reads, passed on without a copy
        self._buffer += chunk
        out = bytearray()
        while (end := self._buffer.find(b"\n\n")) >= 0:
            event, self._buffer = self._buffer[: end + 2], self._buffer[end + 2 :]
            if not _is_usage_only(event):
                out += event
        return bytes(out)

    def flush(self) -> bytes:
        rest, self._buffer = self._buffer, b""
        return rest


def _plain(data: bytes) -> bool:
    """True when ``data`` (one or more chat chunks' lines) holds content deltas only, read from its bytes
    without parsing it: no ``usage``, ``error`` or ``[DONE]``, and only null ``finish_reason``, reasoning and
    ``tool_calls`` fields. Most of a stream's reads; parsing each chunk's JSON was ~10 % of the gateway's CPU
    at 64 streams, and counting each key's forms per line ~18 % at 256 (py-spy). A few ``bytes.find`` and
    ``count`` scans (each ~0.2 µs on a 200-byte chunk; ``in`` and a regular expression were slower).

    Exact for JSON without ``\\u`` escapes: a key is then spelled literally, and a quote inside a string is
    escaped, so ``"finish_reason":null`` occurs only as a key with a null value. Chunks with ``\\u`` escapes,
    or other spacing around the colon (``: null`` for ``finish_reason`` aside), are parsed."""
    if data.find(b"\\u") >= 0 or data.find(b'"usage"') >= 0 or data.find(b'"error"') >= 0 or data.find(b"[DONE]") >= 0:
        return False
    if data.count(b'"finish_reason"') != data.count(b'"finish_reason":null') + data.count(b'"finish_reason": null'):
        return False
    if data.find(b'"reasoning') < 0 and data.find(b'"tool_calls"') < 0:
        return True
    reasoning = data.count(b'"reasoning":null') + data.count(b'"reasoning_content":null')
    return data.count(b'"reasoning') == reasoning and data.count(b'"tool_calls"') == data.count(b'"tool_calls":null')


def plain_events(chunk: bytes) -> int:
    """How many events ``chunk`` holds when it is whole chat events of one ``data:`` line each (``_data_events``),
    with LF line ends, no error and content deltas only (``_plain``): what every reader of the stream
    (``LineEnds``, ``DataEvents``, ``StreamWatcher``, ``UsageStripper``, gateway.engine_messages.StreamScrubber)
    passes on unchanged, the watcher counting each event as one token chunk. 0 for any other chunk."""
    events = _data_events(chunk)
    if not events or chunk.find(b"\r") >= 0 or chunk.find(b'"error"') >= 0 or not _plain(chunk):
        return 0
    return events


def _may_hold_usage(data: bytes) -> bool:
    return data.find(b'"usage"') >= 0 or data.find(b"\\u") >= 0  # the key, spelled literally or with an escape


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
