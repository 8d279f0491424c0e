"""Reading an engine's streamed OpenAI chat completion for a translation that says it again in another API
(translate_stream: Anthropic Messages; responses_chat_stream: OpenAI Responses).

The reader splits the stream into lines whatever their ends (sse.LineEnds), parses each ``data:`` event,
keeps the engine's ``finish_reason``, usage chunk and in-stream ``{"error": ...}``, and hands the first
choice's pieces to its subclass's hooks: ``_begin`` once before the first, then ``_reasoning``
(``delta.reasoning`` / ``reasoning_content``), ``_content`` (``delta.content``), ``_tool_piece`` (each of
``delta.tool_calls``) and ``_finished`` (the choice that carries a ``finish_reason``); ``[DONE]`` after a
finish reason calls ``_end``. A stream cut before its end never calls ``_end``: ``complete`` stays false and
the caller ends the client's stream with an error event.
"""

import json
from typing import Any

from gateway.sse import LineEnds
from gateway.translate import Json, reasoning_text


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
        if event.get("error") is not None:
            error = event["error"]
            self.error = str(error.get("message") if isinstance(error, dict) and error.get("message") else error)
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
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    self._tool_piece(call, out)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
                self._finished(choice)

    def _begin(self, event: Json, out: bytearray) -> None:
        """The first chunk (its ``id`` names the answer): what the translation sends first."""

    def _reasoning(self, text: str, out: bytearray) -> None:
        """A piece of the engine's reasoning."""

    def _content(self, text: str, out: bytearray) -> None:
        """A piece of the answer's text."""

    def _tool_piece(self, call: dict[str, Any], out: bytearray) -> None:
        """A piece of a tool call (its index, id, name, arguments as the engine streams them)."""

    def _finished(self, choice: Json) -> None:
        """The choice that carried the finish reason (already in ``finish_reason``)."""

    def _end(self, out: bytearray) -> None:
        """The stream ended properly: the translation's closing events; sets ``_ended``."""
        self._ended = True
