"""An engine's streamed OpenAI chat completion, re-said as an Anthropic Messages event stream.

Input (OpenAI chat streaming, https://platform.openai.com/docs/api-reference/chat-streaming and
https://platform.openai.com/docs/guides/function-calling#streaming): ``data: {chunk}`` lines whose
``choices[0].delta`` carries ``content`` pieces or ``tool_calls`` pieces (``index``; ``id`` and
``function.name`` on a call's first piece; ``function.arguments`` as string pieces), then a chunk with
``finish_reason`` (vLLM adds ``stop_reason``, the matched stop string), a ``choices: []`` chunk with
``usage`` when ``stream_options.include_usage`` was asked for, then ``data: [DONE]``. Events may be split
anywhere across reads; ``data:`` with or without a space and CRLF line ends are accepted (the SSE spec,
https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation).

Output (Anthropic streaming, https://docs.anthropic.com/en/docs/build-with-claude/streaming), each as
``event: NAME`` / ``data: {json}`` / blank line: ``message_start`` (empty content), then per content block,
one open at a time with increasing ``index``, ``content_block_start`` (``text`` with empty text, or
``tool_use`` with id, name and ``input: {}``), ``content_block_delta``s (``text_delta``, or
``input_json_delta`` whose ``partial_json`` pieces join to the tool's input JSON), ``content_block_stop``;
then ``message_delta`` (``stop_reason``, ``stop_sequence``, ``usage``) and ``message_stop``. The engine's
usage chunk comes last, after ``message_start`` went out with ``input_tokens: 0`` (unless a chunk before
carried usage), so ``message_delta.usage`` carries ``input_tokens`` (and ``cache_read_input_tokens``) as
well as ``output_tokens``: Anthropic documents its counts as cumulative, and the SDK takes them from there.

Tool calls are assumed to stream one after another, as vLLM, SGLang and OpenAI send them; a piece for a
call other than the open one starts a new block. Only choice 0 is read (Anthropic has no ``n``).
"""

import json
from typing import Any

from gateway.translate import Json, anthropic_usage, matched_stop, message_id, stop_reason


def sse_event(kind: str, **fields: Any) -> bytes:
    """One Anthropic server-sent event: ``event: KIND`` and data ``{"type": KIND, **fields}``."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()


class ChatStreamToMessages:
    """Feed it an engine's OpenAI chat stream; it returns the Anthropic event stream to send, piece by piece.

    ``model`` is the name the client asked for. ``usage`` and ``finish_reason`` hold the engine's own
    values once seen (for accounting). When ``complete`` is false at the end, no ``message_delta`` or
    ``message_stop`` has been or will be sent: the caller ends the stream with an error event instead.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self.finish_reason: str | None = None
        self.usage: Json | None = None
        self._pending = b""
        self._stop_string: str | None = None
        self._done = False  # [DONE] arrived
        self._ended = False  # message_stop sent
        self._msg_id = ""
        self._index = -1  # index of the last block opened
        self._open: str | None = None  # "text" or "tool_use" while a block is open
        self._call: tuple[Any, str] = (None, "")  # (upstream index, id) of the open tool call
        self._tool_calls = 0

    @property
    def complete(self) -> bool:
        """True when the engine's stream ended properly: a ``finish_reason``, then ``[DONE]``."""
        return self._done and self.finish_reason is not None

    def feed(self, chunk: bytes) -> bytes:
        """The Anthropic events for the complete lines in ``chunk`` (with what was pending); may be empty."""
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        out = bytearray()
        for line in lines:
            self._line(line.rstrip(b"\r"), out)
        return bytes(out)

    def finish(self) -> bytes:
        """At the end of the engine's stream: the events of an unterminated last line, if any.

        Ends nothing itself: a complete stream was ended at ``[DONE]``, and an incomplete one is left
        open for the caller's error event (no block is closed, no ``message_stop`` invented).
        """
        line, self._pending = self._pending, b""
        out = bytearray()
        self._line(line.rstrip(b"\r"), out)
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
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if not self._msg_id:
            self._start(event, out)
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                self._text(delta["content"], out)
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    self._tool_piece(call, out)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
                self._stop_string = matched_stop(choice)

    def _start(self, event: Json, out: bytearray) -> None:
        self._msg_id = message_id(event.get("id"))
        usage = {"input_tokens": anthropic_usage(self.usage)["input_tokens"], "output_tokens": 0}
        message: Json = {"id": self._msg_id, "type": "message", "role": "assistant", "model": self.model}
        message |= {"content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
        out += sse_event("message_start", message=message)

    def _open_block(self, kind: str, block: Json, out: bytearray) -> None:
        self._close(out)
        self._index += 1
        self._open = kind
        out += sse_event("content_block_start", index=self._index, content_block=block)

    def _close(self, out: bytearray) -> None:
        if self._open is not None:
            out += sse_event("content_block_stop", index=self._index)
            self._open = None

    def _delta(self, delta: Json, out: bytearray) -> None:
        out += sse_event("content_block_delta", index=self._index, delta=delta)

    def _text(self, text: str, out: bytearray) -> None:
        if self._open != "text":
            self._open_block("text", {"type": "text", "text": ""}, out)
        self._delta({"type": "text_delta", "text": text}, out)

    def _tool_piece(self, call: Json, out: bytearray) -> None:
        """A piece of a tool call: a new block when it belongs to another call than the open one (another
        ``index``, or another ``id`` for engines that repeat the id on every piece)."""
        function = call.get("function") or {}
        key, call_id = call.get("index", 0), call.get("id")
        if self._open != "tool_use" or key != self._call[0] or (call_id and call_id != self._call[1]):
            call_id = call_id or f"toolu_{self._msg_id.removeprefix('msg_')}_{self._tool_calls}"
            self._call = (key, call_id)
            self._tool_calls += 1
            block: Json = {"type": "tool_use", "id": call_id, "name": str(function.get("name") or ""), "input": {}}
            self._open_block("tool_use", block, out)
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._delta({"type": "input_json_delta", "partial_json": arguments}, out)

    def _end(self, out: bytearray) -> None:
        self._close(out)
        reason = stop_reason(self.finish_reason, self._stop_string, tool_use=self._tool_calls > 0)
        delta = {"stop_reason": reason, "stop_sequence": self._stop_string if reason == "stop_sequence" else None}
        usage = anthropic_usage(self.usage)
        if self.usage is None:
            usage = {"output_tokens": 0}
        out += sse_event("message_delta", delta=delta, usage=usage)
        out += sse_event("message_stop")
        self._ended = True
