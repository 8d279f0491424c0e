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
  at its end (``response.custom_tool_call_input.delta`` and ``.done``); parallel calls whose pieces the engine
  interleaves still go out one item at a time, each with all its arguments (gateway.chat_stream);

and last ``response.completed`` with the whole response and its usage, or, when the answer hit
max_output_tokens, ``response.incomplete`` with status ``incomplete``, as OpenAI sends it (vLLM says
``response.completed`` then; gateway.engine_messages.StreamScrubber says it as OpenAI does too). A stream cut before
its end gets neither: ``complete`` stays false and the caller ends it with ``response.failed``.
"""

import json
import uuid
from typing import Any

from gateway.chat_stream import ChatStreamReader, ToolCall
from gateway.responses_chat import call_item, response_id, response_object, response_usage, tool_names
from gateway.translate import Json


class ChatStreamToResponses(ChatStreamReader):
    """Feed it an engine's chat stream; it returns the Responses events to send, piece by piece.

    ``usage``, ``finish_reason`` and ``error`` hold the engine's values once seen; ``response_id`` the id
    the client was given ("" until the first chunk)."""

    def __init__(self, request: Json, model: str) -> None:
        super().__init__()
        self.request, self.model = request, model
        self.response_id = ""
        self._custom = tool_names(request)[0]
        self._sequence = 0
        self._output: list[Json] = []  # finished items
        self._open: str | None = None  # "reasoning", "message" or "call"
        self._item_id, self._text = "", ""

    def _emit(self, out: bytearray, kind: str, **fields: Any) -> None:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        out += f"event: {kind}\ndata: {json.dumps(event)}\n\n".encode()

    def _begin(self, event: Json, out: bytearray) -> None:
        self.response_id = response_id(event.get("id"))
        start = response_object(self.request, self.model, self.response_id, [], "in_progress")
        self._emit(out, "response.created", response=start)
        self._emit(out, "response.in_progress", response=start)

    def _reasoning(self, text: str, out: bytearray) -> None:
        self._piece("reasoning", text, out)

    def _content(self, text: str, out: bytearray) -> None:
        self._piece("message", text, out)

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
                item = {
                    "type": "message",
                    "id": self._item_id,
                    "role": "assistant",
                    "content": [],
                    "status": "in_progress",
                }
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            self._emit(out, "response.output_item.added", output_index=len(self._output), item=item)
            self._emit(out, "response.content_part.added", **self._where(), content_index=0, part=part)
        self._text += text
        delta_kind = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra: Json = {} if kind == "reasoning" else {"logprobs": []}
        self._emit(out, delta_kind, **self._where(), content_index=0, delta=text, **extra)

    def _open_call(self, call: ToolCall, out: bytearray) -> None:
        self._close(out)
        call.id = call.id or f"call_{uuid.uuid4().hex[:24]}"
        self._open, self._live, self._text = "call", call, ""
        if call.name in self._custom:
            self._item_id = f"ctc_{uuid.uuid4().hex}"
            item: Json = {"type": "custom_tool_call", "id": self._item_id, "call_id": call.id, "name": call.name}
            item["input"] = ""
        else:
            self._item_id = f"fc_{uuid.uuid4().hex}"
            item = {"type": "function_call", "id": self._item_id, "call_id": call.id, "name": call.name}
            item |= {"arguments": "", "status": "in_progress"}
        self._emit(out, "response.output_item.added", output_index=len(self._output), item=item)

    def _call_arguments(self, call: ToolCall, out: bytearray) -> None:
        piece, call.sent = call.arguments[call.sent :], len(call.arguments)
        self._text += piece
        if piece and call.name not in self._custom:
            self._emit(out, "response.function_call_arguments.delta", **self._where(), delta=piece)

    def _close(self, out: bytearray) -> None:
        part: Json
        if self._open == "reasoning":
            part = {"type": "reasoning_text", "text": self._text}
            self._emit(out, "response.reasoning_text.done", **self._where(), content_index=0, text=self._text)
            self._emit(out, "response.content_part.done", **self._where(), content_index=0, part=part)
            item: Json = {
                "type": "reasoning",
                "id": self._item_id,
                "summary": [],
                "content": [part],
                "status": "completed",
            }
        elif self._open == "message":
            part = {"type": "output_text", "text": self._text, "annotations": [], "logprobs": None}
            self._emit(out, "response.output_text.done", **self._where(), content_index=0, text=self._text, logprobs=[])
            self._emit(out, "response.content_part.done", **self._where(), content_index=0, part=part)
            item = {
                "type": "message",
                "id": self._item_id,
                "role": "assistant",
                "content": [part],
                "status": "completed",
            }
        elif self._open == "call" and self._live is not None:
            item = {**call_item(self.request, self._live.id, self._live.name, self._text), "id": self._item_id}
            if item["type"] == "custom_tool_call":
                self._emit(out, "response.custom_tool_call_input.delta", **self._where(), delta=item["input"])
                self._emit(out, "response.custom_tool_call_input.done", **self._where(), input=item["input"])
            else:
                self._emit(
                    out,
                    "response.function_call_arguments.done",
                    **self._where(),
                    arguments=self._text,
                    name=item["name"],
                )
        else:
            return
        self._emit(out, "response.output_item.done", output_index=len(self._output), item=item)
        self._output.append(item)
        self._open, self._live = None, None

    def _end(self, out: bytearray) -> None:
        self._waiting_calls(out)
        self._close(out)
        status = "incomplete" if self.finish_reason == "length" else "completed"
        response = response_object(self.request, self.model, self.response_id, self._output, status)
        response["usage"] = response_usage(self.usage)
        self._emit(out, f"response.{status}", response=response)
        self._ended = True
