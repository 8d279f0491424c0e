"""An engine's streamed chat completion, re-said as an OpenAI Responses event stream.

Input: the chat stream gateway.translate_stream reads (``delta.reasoning``/``reasoning_content``,
``delta.content``, ``delta.tool_calls`` pieces, a ``finish_reason``, the usage chunk, ``[DONE]``; an
engine's ``{"error": ...}``).

Output, each as ``event: TYPE`` / ``data: {json}`` with a ``sequence_number`` counting from 0, in the order
of vLLM 0.32's own simple (non-harmony) stream (vllm/entrypoints/openai/responses/streaming_events.py
``SimpleStreamingEventProcessor``; serving.py ``responses_stream_generator``): ``response.created`` and
``response.in_progress`` (status in_progress, no output); then one output item at a time, a new one when
the delta's kind changes (reasoning, text, tool call) or another tool call begins:

- reasoning: ``response.output_item.added`` (a ``reasoning`` item), ``response.content_part.added``
  (``reasoning_text``), ``response.reasoning_text.delta``…, then ``response.reasoning_text.done``,
  ``response.content_part.done``, ``response.output_item.done``;
- text: ``output_item.added`` (a ``message``), ``content_part.added`` (``output_text``),
  ``response.output_text.delta``…, then ``response.output_text.done``, ``content_part.done``,
  ``output_item.done``;
- a tool call: ``output_item.added`` (a ``function_call`` with its ``call_id``, name and empty arguments),
  ``response.function_call_arguments.delta``…, then ``response.function_call_arguments.done`` and
  ``output_item.done``; a custom tool's call becomes a ``custom_tool_call`` whose ``input`` is sent whole
  at its end (``response.custom_tool_call_input.delta`` and ``.done``);

and last ``response.completed`` with the whole response (status ``incomplete`` when the answer hit
max_output_tokens, as vLLM reports it, with the usage). A stream cut before its end gets no
``response.completed``: ``complete`` stays false and the caller ends it with ``response.failed``.
"""

import json
import uuid
from typing import Any

from gateway.responses_chat import call_item, response_id, response_object, response_usage, tool_names
from gateway.sse import LineEnds
from gateway.translate import Json, reasoning_text


class ChatStreamToResponses:
    """Feed it an engine's chat stream; it returns the Responses events to send, piece by piece.

    ``usage``, ``finish_reason`` and ``error`` hold the engine's values once seen; ``response_id`` the id
    the client was given ("" until the first chunk)."""

    def __init__(self, request: Json, model: str) -> None:
        self.request, self.model = request, model
        self.finish_reason: str | None = None
        self.usage: Json | None = None
        self.error: str | None = None
        self.response_id = ""
        self._custom = tool_names(request)[0]
        self._ends, self._pending = LineEnds(), b""
        self._sequence = 0
        self._done = self._ended = False
        self._output: list[Json] = []  # finished items
        self._open: str | None = None  # "reasoning", "message" or "call"
        self._item_id, self._text = "", ""
        self._call: tuple[Any, str, str] = (None, "", "")  # (chat index, call_id, name) of the open call

    @property
    def complete(self) -> bool:
        """True when the engine's stream ended properly: a ``finish_reason``, then ``[DONE]``."""
        return self._done and self.finish_reason is not None

    def feed(self, chunk: bytes) -> bytes:
        lines = (self._pending + self._ends.feed(chunk)).split(b"\n")
        self._pending = lines.pop()
        out = bytearray()
        for line in lines:
            self._line(line, out)
        return bytes(out)

    def finish(self) -> bytes:
        """The events of an unterminated last line, if any; ends nothing itself (see ChatStreamToMessages)."""
        line, self._pending = self._pending, b""
        out = bytearray()
        self._line(line, out)
        return bytes(out)

    def _emit(self, out: bytearray, kind: str, **fields: Any) -> None:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        out += f"event: {kind}\ndata: {json.dumps(event)}\n\n".encode()

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
        if not self.response_id:
            self.response_id = response_id(event.get("id"))
            start = response_object(self.request, self.model, self.response_id, [], "in_progress")
            self._emit(out, "response.created", response=start)
            self._emit(out, "response.in_progress", response=start)
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if thinking := reasoning_text(delta):
                self._piece("reasoning", thinking, out)
            if isinstance(delta.get("content"), str) and delta["content"]:
                self._piece("message", delta["content"], out)
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    self._tool_piece(call, out)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def _where(self) -> Json:
        return {"output_index": len(self._output), "item_id": self._item_id}

    def _piece(self, kind: str, text: str, out: bytearray) -> None:
        if self._open != kind:
            self._close(out)
            prefix = "rs" if kind == "reasoning" else "msg"
            self._open, self._item_id, self._text = kind, f"{prefix}_{uuid.uuid4().hex}", ""
            if kind == "reasoning":
                item: Json = {"type": "reasoning", "id": self._item_id, "summary": [], "status": "in_progress"}
                part: Json = {"type": "reasoning_text", "text": ""}
            else:
                item = {"type": "message", "id": self._item_id, "role": "assistant", "content": [],
                        "status": "in_progress"}  # fmt: skip
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            self._emit(out, "response.output_item.added", output_index=len(self._output), item=item)
            self._emit(out, "response.content_part.added", **self._where(), content_index=0, part=part)
        self._text += text
        delta_kind = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra: Json = {} if kind == "reasoning" else {"logprobs": []}
        self._emit(out, delta_kind, **self._where(), content_index=0, delta=text, **extra)

    def _tool_piece(self, call: Json, out: bytearray) -> None:
        function = call.get("function") or {}
        key, call_id = call.get("index", 0), call.get("id")
        if self._open != "call" or key != self._call[0] or (call_id and call_id != self._call[1]):
            self._close(out)
            name = str(function.get("name") or "")
            self._open, self._item_id, self._text = "call", f"fc_{uuid.uuid4().hex}", ""
            self._call = (key, str(call_id or f"call_{uuid.uuid4().hex[:24]}"), name)
            if name in self._custom:
                self._item_id = f"ctc_{uuid.uuid4().hex}"
                item: Json = {"type": "custom_tool_call", "id": self._item_id, "call_id": self._call[1], "name": name,
                              "input": ""}  # fmt: skip
            else:
                item = {"type": "function_call", "id": self._item_id, "call_id": self._call[1], "name": name,
                        "arguments": "", "status": "in_progress"}  # fmt: skip
            self._emit(out, "response.output_item.added", output_index=len(self._output), item=item)
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._text += arguments
            if self._call[2] not in self._custom:
                self._emit(out, "response.function_call_arguments.delta", **self._where(), delta=arguments)

    def _close(self, out: bytearray) -> None:
        part: Json
        if self._open == "reasoning":
            part = {"type": "reasoning_text", "text": self._text}
            self._emit(out, "response.reasoning_text.done", **self._where(), content_index=0, text=self._text)
            self._emit(out, "response.content_part.done", **self._where(), content_index=0, part=part)
            item: Json = {"type": "reasoning", "id": self._item_id, "summary": [], "content": [part],
                          "status": "completed"}  # fmt: skip
        elif self._open == "message":
            part = {"type": "output_text", "text": self._text, "annotations": [], "logprobs": None}
            self._emit(out, "response.output_text.done", **self._where(), content_index=0, text=self._text,
                       logprobs=[])  # fmt: skip
            self._emit(out, "response.content_part.done", **self._where(), content_index=0, part=part)
            item = {"type": "message", "id": self._item_id, "role": "assistant", "content": [part],
                    "status": "completed"}  # fmt: skip
        elif self._open == "call":
            item = {**call_item(self.request, self._call[1], self._call[2], self._text), "id": self._item_id}
            if item["type"] == "custom_tool_call":
                self._emit(out, "response.custom_tool_call_input.delta", **self._where(), delta=item["input"])
                self._emit(out, "response.custom_tool_call_input.done", **self._where(), input=item["input"])
            else:
                self._emit(out, "response.function_call_arguments.done", **self._where(), arguments=self._text,
                           name=item["name"])  # fmt: skip
        else:
            return
        self._emit(out, "response.output_item.done", output_index=len(self._output), item=item)
        self._output.append(item)
        self._open = None

    def _end(self, out: bytearray) -> None:
        self._close(out)
        status = "incomplete" if self.finish_reason == "length" else "completed"
        response = response_object(self.request, self.model, self.response_id, self._output, status)
        response["usage"] = response_usage(self.usage)
        self._emit(out, "response.completed", response=response)
        self._ended = True
