"""Reading an engine's streamed OpenAI chat completion for a translation that says it again in another API
(translate_stream: Anthropic Messages; responses_chat_stream: OpenAI Responses).

The reader splits the stream into lines whatever their ends (sse.LineEnds), parses each ``data:`` event,
keeps the engine's ``finish_reason``, usage chunk and in-stream error (``{"error": ...}``, or vLLM's flat
``{"object": "error", "message": ...}``), and hands the first choice's pieces to its subclass's hooks: ``_begin``
once before the first, then ``_reasoning`` (``delta.reasoning`` / ``reasoning_content``), ``_content``
(``delta.content``), the tool-call hooks below and ``_finished`` (the choice that carries a ``finish_reason``);
``[DONE]`` after a finish reason calls ``_end``. A stream cut before its end never calls ``_end``: ``complete``
stays false and the caller ends the client's stream with an error event. The relay gives it one ``data:`` line
per event (gateway.sse.DataEvents).

Tool calls: the translations send one call at a time (Anthropic's content blocks are sequential; a Responses
output item is done before the next is added), while an engine may interleave the argument pieces of parallel
calls (index 0, 1, 1, 0). The reader keeps each call's pieces (``ToolCall``) and opens at most one live:
``_open_call`` (the translation closes what is open and starts the call's block or item, then sets ``_live``),
``_call_arguments`` (what of the live call's arguments is not sent yet). A new call goes live at once when no call
is, or when the live one's arguments are whole JSON already (engines that stream calls one after another keep
streaming); otherwise it waits, its pieces kept, and the translation sends the calls still waiting, whole, at its
end (``_waiting_calls``), before its closing events.
"""

import json
import logging
from dataclasses import dataclass
from typing import Any

from gateway.sse import LineEnds, error_text
from gateway.translate import Json, reasoning_text

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ToolCall:
    """One tool call as the engine streamed it so far: ``arguments`` (a JSON text once whole), ``sent`` characters
    of them passed on, ``opened`` once its block or item was started; ``id`` "" until the engine or the translation
    names it."""

    id: str
    name: str
    arguments: str = ""
    sent: int = 0
    opened: bool = False


class ToolCalls:
    """The answer's tool calls in the order they began. A piece belongs to the call with its ``id`` when it has one
    (engines that repeat the id on every piece, or give every call index 0), else to the last call with its
    ``index``."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self._by_id: dict[str, ToolCall] = {}
        self._by_index: dict[Any, ToolCall] = {}

    def piece(self, piece: Json) -> tuple[ToolCall, bool]:
        """The call ``piece`` (one of ``delta.tool_calls``) belongs to, its arguments appended; whether it began."""
        function = piece.get("function") or {}
        call_id, index = piece.get("id"), piece.get("index", 0)
        call = self._by_id.get(str(call_id)) if call_id else self._by_index.get(index)
        began = call is None
        if call is None:
            call = ToolCall(str(call_id or ""), str(function.get("name") or ""))
            self.calls.append(call)
            if call_id:
                self._by_id[str(call_id)] = call
            self._by_index[index] = call
        elif not call.name and function.get("name"):
            call.name = str(function["name"])
        if isinstance(function.get("arguments"), str):
            call.arguments += function["arguments"]
        return call, began


def whole_json(text: str) -> bool:
    """True when ``text`` parses as JSON: a call's arguments that no further piece can extend (only whitespace)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class ChatStreamReader:
    """Feed it an engine's chat stream; it returns what its subclass makes of each piece.

    ``usage``, ``finish_reason`` and ``error`` hold the engine's values once seen (for accounting)."""

    def __init__(self) -> None:
        self.finish_reason: str | None = None
        self.usage: Json | None = None
        self.error: str | None = None
        self._ends, self._pending = LineEnds(), b""
        self._begun = False
        self._done = False  # [DONE] arrived
        self._ended = False  # the translation's own end was sent
        self._calls = ToolCalls()
        self._live: ToolCall | None = None  # the call whose block or item is open; the translation sets it

    @property
    def complete(self) -> bool:
        """True when the engine's stream ended properly: a ``finish_reason``, then ``[DONE]``."""
        return self._done and self.finish_reason is not None

    def feed(self, chunk: bytes) -> bytes:
        """The translated events for the complete lines in ``chunk`` (with what was pending); may be empty."""
        lines = (self._pending + self._ends.feed(chunk)).split(b"\n")
        self._pending = lines.pop()
        out = bytearray()
        for line in lines:
            self._line(line, out)
        return bytes(out)

    def finish(self) -> bytes:
        """At the end of the engine's stream: the events of an unterminated last line, if any.

        Ends nothing itself: a complete stream was ended at ``[DONE]``, and an incomplete one is left open
        for the caller's error event (nothing closed, no end invented).
        """
        line, self._pending = self._pending, b""
        out = bytearray()
        self._line(line, out)
        return bytes(out)

    def _line(self, line: bytes, out: bytearray) -> None:
        if self._ended or not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self._done = True
            if self.complete:
                self._end(out)
            return
        try:
            event = json.loads(data)
        except ValueError:
            return
        if isinstance(event, dict):
            self._chunk(event, out)

    def _chunk(self, event: Json, out: bytearray) -> None:
        if event.get("error") is not None or event.get("object") == "error":
            self.error = error_text(event)
            return
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if not self._begun:
            self._begun = True
            self._begin(event, out)
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if thinking := reasoning_text(delta):
                self._reasoning(thinking, out)
            if isinstance(delta.get("content"), str) and delta["content"]:
                self._content(delta["content"], out)
            for piece in delta.get("tool_calls") or []:
                if isinstance(piece, dict):
                    self._tool_piece(piece, out)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
                self._finished(choice)

    def _begin(self, event: Json, out: bytearray) -> None:
        """The first chunk (its ``id`` names the answer): what the translation sends first."""

    def _reasoning(self, text: str, out: bytearray) -> None:
        """A piece of the engine's reasoning."""

    def _content(self, text: str, out: bytearray) -> None:
        """A piece of the answer's text."""

    def _tool_piece(self, piece: Json, out: bytearray) -> None:
        """A piece of a tool call (its index, id, name, arguments as the engine streams them): kept, and sent when
        its call is live (module docstring)."""
        call, began = self._calls.piece(piece)
        live = self._live
        if began and (live is None or whole_json(live.arguments)):
            self._open_call(call, out)
            call.opened = True
        if call is self._live:
            self._call_arguments(call, out)
        elif call.opened and call.arguments[call.sent :].strip():
            log.warning("a piece of tool call %r came after its block was closed: dropped", call.name)

    def _waiting_calls(self, out: bytearray) -> None:
        """The calls that never went live, each whole, in the order they began (at the translation's end)."""
        for call in self._calls.calls:
            if not call.opened:
                self._open_call(call, out)
                call.opened = True
                self._call_arguments(call, out)

    def _open_call(self, call: ToolCall, out: bytearray) -> None:
        """Close what is open and start ``call``'s block or item (naming it if the engine did not); set ``_live``."""

    def _call_arguments(self, call: ToolCall, out: bytearray) -> None:
        """Send what of the live ``call``'s arguments is not sent yet (``call.sent`` onwards); advance ``sent``."""

    def _finished(self, choice: Json) -> None:
        """The choice that carried the finish reason (already in ``finish_reason``)."""

    def _end(self, out: bytearray) -> None:
        """The stream ended properly: the translation's closing events; sets ``_ended``."""
        self._ended = True
