"""An engine's streamed OpenAI chat completion, re-said as an Anthropic Messages event stream.

Input (OpenAI chat streaming, https://platform.openai.com/docs/api-reference/chat-streaming and
https://platform.openai.com/docs/guides/function-calling#streaming): ``data: {chunk}`` lines whose
``choices[0].delta`` carries ``content`` pieces or ``tool_calls`` pieces (``index``; ``id`` and
``function.name`` on a call's first piece; ``function.arguments`` as string pieces), then a chunk with
``finish_reason`` (vLLM adds ``stop_reason``, the matched stop string), a ``choices: []`` chunk with
``usage`` when ``stream_options.include_usage`` was asked for, then ``data: [DONE]``. With
``continuous_usage_stats`` (asked for by gateway.translate, as vLLM's own /v1/messages asks it) every chunk
carries the usage so far, the first one the prompt's size. Reasoning comes as ``delta.reasoning`` (vLLM ≥
0.10) or ``delta.reasoning_content`` (SGLang, older vLLM). An engine's error mid-stream is ``data:
{"error": {...}}``. Events may be split anywhere across reads; ``data:`` with or without a space and any of
the SSE line ends are accepted (gateway.sse.LineEnds).

Output (Anthropic streaming, https://docs.anthropic.com/en/docs/build-with-claude/streaming), each as
``event: NAME`` / ``data: {json}`` / blank line: ``message_start`` (empty content), then per content block,
one open at a time with increasing ``index``, ``content_block_start`` (``thinking`` with empty thinking,
``text`` with empty text, or ``tool_use`` with id, name and ``input: {}``), ``content_block_delta``s
(``thinking_delta`` then one ``signature_delta``, ``text_delta``, or ``input_json_delta`` whose
``partial_json`` pieces join to the tool's input JSON), ``content_block_stop``; then ``message_delta``
(``stop_reason``, ``stop_sequence``, ``usage``) and ``message_stop`` (vLLM 0.32's
vllm/entrypoints/anthropic/serving.py ``message_stream_converter`` sends the same). ``message_start``
carries the prompt's size from the first chunk's usage; the cached part is known only from the engine's
last usage chunk, so ``message_delta.usage`` carries ``input_tokens`` and ``cache_read_input_tokens`` as
well as ``output_tokens``: Anthropic documents its counts as cumulative, and the SDK takes them from there.

Tool calls are assumed to stream one after another, as vLLM, SGLang and OpenAI send them; a piece for a
call other than the open one starts a new block. Only choice 0 is read (Anthropic has no ``n``).
"""

import json
import uuid
from typing import Any

from gateway.sse import LineEnds
from gateway.translate import Json, anthropic_usage, matched_stop, message_id, reasoning_text, stop_reason


def sse_event(kind: str, **fields: Any) -> bytes:
    """One Anthropic server-sent event: ``event: KIND`` and data ``{"type": KIND, **fields}``."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()


class ChatStreamToMessages:
    """Feed it an engine's OpenAI chat stream; it returns the Anthropic event stream to send, piece by piece.

    ``model`` is the name the client asked for. ``usage`` and ``finish_reason`` hold the engine's own
    values once seen (for accounting); ``error`` the message of an error the engine sent in its stream. When
    ``complete`` is false at the end, no ``message_delta`` or ``message_stop`` has been or will be sent: the
    caller ends the stream with an error event instead.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self.finish_reason: str | None = None
        self.usage: Json | None = None
        self.error: str | None = None
        self._ends = LineEnds()
        self._pending = b""
        self._stop_string: str | None = None
        self._done = False  # [DONE] arrived
        self._ended = False  # message_stop sent
        self._msg_id = ""
        self._index = -1  # index of the last block opened
        self._open: str | None = None  # "thinking", "text" or "tool_use" while a block is open
        self._call: tuple[Any, str] = (None, "")  # (upstream index, id) of the open tool call
        self._tool_calls = 0

    @property
    def complete(self) -> bool:
        """True when the engine's stream ended properly: a ``finish_reason``, then ``[DONE]``."""
        return self._done and self.finish_reason is not None

    def feed(self, chunk: bytes) -> bytes:
        """The Anthropic events for the complete lines in ``chunk`` (with what was pending); may be empty."""
        lines = (self._pending + self._ends.feed(chunk)).split(b"\n")
        self._pending = lines.pop()
        out = bytearray()
        for line in lines:
            self._line(line, out)
        return bytes(out)

    def finish(self) -> bytes:
        """At the end of the engine's stream: the events of an unterminated last line, if any.

        Ends nothing itself: a complete stream was ended at ``[DONE]``, and an incomplete one is left
        open for the caller's error event (no block is closed, no ``message_stop`` invented).
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
        if not self._msg_id:
            self._start(event, out)
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if thinking := reasoning_text(delta):
                self._thinking(thinking, out)
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
        if self._open == "thinking":  # vLLM closes a thinking block with its signature
            self._delta({"type": "signature_delta", "signature": uuid.uuid4().hex}, out)
        if self._open is not None:
            out += sse_event("content_block_stop", index=self._index)
            self._open = None

    def _thinking(self, text: str, out: bytearray) -> None:
        if self._open != "thinking":
            self._open_block("thinking", {"type": "thinking", "thinking": ""}, out)
        self._delta({"type": "thinking_delta", "thinking": text}, out)

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
        usage = anthropic_usage(self.usage) if self.usage is not None else {"output_tokens": 0}
        out += sse_event("message_delta", delta=delta, usage=usage)
        out += sse_event("message_stop")
        self._ended = True
