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
vllm/entrypoints/anthropic/serving.py ``message_stream_converter`` sends the same).

Usage: ``message_start.usage`` carries ``input_tokens`` (the prompt less its cached part, as Anthropic counts it),
``cache_creation_input_tokens`` (the engine's ``prompt_tokens_details.created_cache_tokens``, vLLM's name, else 0)
and ``cache_read_input_tokens`` (``prompt_tokens_details.cached_tokens``, else 0). vLLM puts the usage on its
first chunk, SGLang 0.5 only from the second on (python/sglang/srt/entrypoints/openai/serving_chat.py: its role
chunk has none), so ``message_start`` waits for a chunk with usage or for the first content block, whichever
comes first. An engine that gave no prompt count by then (one that ignores ``stream_options``) gets
``prompt_estimate``: about 4 bytes of the chat request per token (OpenAI's rule of thumb for English text,
https://help.openai.com/en/articles/4936856), an estimate the exact count in ``message_delta.usage`` replaces:
Anthropic documents its counts there as cumulative, and the SDK takes them from there.

Tool calls go out one block at a time, each with all its ``input_json_delta`` pieces, however the engine
interleaves parallel calls (gateway.chat_stream). Only choice 0 is read (Anthropic has no ``n``).
"""

import json
import uuid
from typing import Any

from gateway.chat_stream import ChatStreamReader, ToolCall
from gateway.translate import Json, anthropic_usage, matched_stop, message_id, stop_reason

BYTES_PER_TOKEN = 4  # of a prompt's text, roughly (module docstring)


def prompt_estimate(chat_request: bytes) -> int:
    """The tokens of a prompt whose chat request is ``chat_request`` (its JSON bytes), estimated (module docstring)."""
    return max(1, len(chat_request) // BYTES_PER_TOKEN)


def message_usage(usage: Any, prompt_estimate: int = 0) -> Json:
    """Anthropic's usage with both cache fields from an OpenAI ``usage`` (None: not reported); ``input_tokens`` is
    ``prompt_estimate`` when the engine gave no ``prompt_tokens``."""
    usage = usage if isinstance(usage, dict) else {}
    out = anthropic_usage(usage)
    details = usage.get("prompt_tokens_details") or {}
    created = details.get("created_cache_tokens") if isinstance(details, dict) else None
    if isinstance(created, int):
        out["input_tokens"] = max(0, out["input_tokens"] - created)
    if usage.get("prompt_tokens") is None:
        out["input_tokens"] = prompt_estimate
    return {
        "input_tokens": out["input_tokens"],
        "cache_creation_input_tokens": created if isinstance(created, int) else 0,
        "cache_read_input_tokens": out.get("cache_read_input_tokens", 0),
        "output_tokens": out["output_tokens"],
    }


def sse_event(kind: str, **fields: Any) -> bytes:
    """One Anthropic server-sent event: ``event: KIND`` and data ``{"type": KIND, **fields}``."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()


class ChatStreamToMessages(ChatStreamReader):
    """Feed it an engine's OpenAI chat stream; it returns the Anthropic event stream to send, piece by piece.

    ``model`` is the name the client asked for; ``prompt_estimate`` the prompt's tokens to say in ``message_start``
    if the engine has not counted them by then (module docstring). ``usage`` and ``finish_reason`` hold the
    engine's own values once seen (for accounting); ``error`` the message of an error the engine sent in its
    stream. When ``complete`` is false at the end, no ``message_delta`` or ``message_stop`` has been or will be
    sent: the caller ends the stream with an error event instead.
    """

    def __init__(self, model: str, prompt_estimate: int = 0) -> None:
        super().__init__()
        self.model, self.prompt_estimate = model, prompt_estimate
        self._stop_string: str | None = None
        self._msg_id = ""
        self._started = False  # message_start was sent
        self._index = -1  # index of the last block opened
        self._open: str | None = None  # "thinking", "text" or "tool_use" while a block is open

    def _begin(self, event: Json, out: bytearray) -> None:
        self._msg_id = message_id(event.get("id"))
        if isinstance(self.usage, dict) and self.usage.get("prompt_tokens") is not None:
            self._start(out)

    def _reasoning(self, text: str, out: bytearray) -> None:
        self._thinking(text, out)

    def _content(self, text: str, out: bytearray) -> None:
        self._text(text, out)

    def _finished(self, choice: Json) -> None:
        self._stop_string = matched_stop(choice)

    def _start(self, out: bytearray) -> None:
        """``message_start``, once, with the usage seen so far (module docstring)."""
        if self._started:
            return
        self._started = True
        usage = message_usage(self.usage, self.prompt_estimate) | {"output_tokens": 0}
        message: Json = {"id": self._msg_id, "type": "message", "role": "assistant", "model": self.model}
        message |= {"content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
        out += sse_event("message_start", message=message)

    def _open_block(self, kind: str, block: Json, out: bytearray) -> None:
        self._start(out)
        self._close(out)
        self._index += 1
        self._open = kind
        out += sse_event("content_block_start", index=self._index, content_block=block)

    def _close(self, out: bytearray) -> None:
        if self._open == "thinking":  # vLLM closes a thinking block with its signature
            self._delta({"type": "signature_delta", "signature": uuid.uuid4().hex}, out)
        if self._open is not None:
            out += sse_event("content_block_stop", index=self._index)
            self._open, self._live = None, None

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

    def _open_call(self, call: ToolCall, out: bytearray) -> None:
        call.id = call.id or f"toolu_{self._msg_id.removeprefix('msg_')}_{self._calls.calls.index(call)}"
        self._open_block("tool_use", {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}, out)
        self._live = call

    def _call_arguments(self, call: ToolCall, out: bytearray) -> None:
        piece, call.sent = call.arguments[call.sent :], len(call.arguments)
        if piece:
            self._delta({"type": "input_json_delta", "partial_json": piece}, out)

    def _end(self, out: bytearray) -> None:
        self._start(out)
        self._waiting_calls(out)
        self._close(out)
        reason = stop_reason(self.finish_reason, self._stop_string, tool_use=bool(self._calls.calls))
        delta = {"stop_reason": reason, "stop_sequence": self._stop_string if reason == "stop_sequence" else None}
        usage = message_usage(self.usage) if self.usage is not None else {"output_tokens": 0}
        out += sse_event("message_delta", delta=delta, usage=usage)
        out += sse_event("message_stop")
        self._ended = True
