"""Anthropic Messages requests to OpenAI chat requests, and chat answers back, for engines that serve only
the OpenAI chat API (SGLang, older vLLM). The streamed answer is translated by ``translate_stream``.

Pure functions on parsed JSON: no I/O, no Django. Shapes follow
- Anthropic Messages API, https://docs.anthropic.com/en/api/messages (``system``, content blocks ``text``,
  ``image``, ``tool_use``, ``tool_result``; ``tools`` with ``input_schema``; ``tool_choice`` auto/any/tool/none;
  ``stop_reason`` end_turn/max_tokens/stop_sequence/tool_use/refusal);
- Anthropic tool use, https://docs.anthropic.com/en/docs/build-with-claude/tool-use (tool_result blocks come
  first in a user message; ``disable_parallel_tool_use``);
- Anthropic vision, https://docs.anthropic.com/en/docs/build-with-claude/vision (image ``source`` base64 or url);
- OpenAI chat completions, https://platform.openai.com/docs/api-reference/chat/create (``tool_calls`` with
  JSON-string ``arguments``, ``role: tool`` messages, ``image_url`` parts, ``stream_options.include_usage``);
- vLLM's extensions to that request and answer (vllm/entrypoints/openai/protocol.py): ``top_k``,
  ``continue_final_message``/``add_generation_prompt``, and the choice's ``stop_reason`` holding the matched
  stop string. SGLang accepts the same request fields (python/sglang/srt/entrypoints/openai/protocol.py).

System content is the top-level ``system`` (a string or text blocks), then the text of any ``role: "system"``
message inside ``messages`` (Claude Code 2.1.328 sends one after the user's first, on every request: its
environment), in that order: together the one leading chat system message, since many chat templates refuse a
system message anywhere else. An engine's own /v1/messages gets such a message as it was sent (vLLM 0.32 takes
it). Text blocks that are Claude Code's ``x-anthropic-billing-header`` line are left out, as vLLM leaves them out.

Answers: an engine's ``reasoning`` (vLLM ≥ 0.10) or ``reasoning_content`` (SGLang, older vLLM) becomes a
``thinking`` block before the text, with a random ``signature`` as vLLM's own /v1/messages gives one.
Usage follows Anthropic's definition, as vLLM 0.32 reports it: ``input_tokens`` is the prompt less its cached
part, which is ``cache_read_input_tokens`` (vllm/entrypoints/anthropic/serving.py ``_build_anthropic_usage``).

What has no counterpart is dropped: the ``metadata`` and ``thinking`` fields, ``cache_control``, a tool
result's ``is_error``, ``thinking``, ``redacted_thinking`` and ``document`` blocks of the history, server tools
(web search and the like, which the engine cannot run) and unknown fields.
"""

import json
import uuid
from typing import Any

Json = dict[str, Any]

# Anthropic request field -> OpenAI chat request field, copied when present and not null.
SAMPLING = {"max_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k"}
EMPTY_SCHEMA: Json = {"type": "object", "properties": {}}


class TranslationError(ValueError):
    """A request whose shape cannot be translated (answer it 400 ``invalid_request_error``)."""


def messages_to_chat(request: Json) -> Json:
    """An Anthropic Messages request as an OpenAI chat-completions request for the same ``model``.

    A trailing assistant message (a "prefill") is continued, not answered: vLLM's and SGLang's
    ``continue_final_message`` with ``add_generation_prompt`` off. The top-level ``system`` leads (module
    docstring). Raises TranslationError when ``messages`` is not a list of ``{"role": "user"|"assistant",
    "content": str | list}`` objects.
    """
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise TranslationError("messages: must be a non-empty list of message objects.")
    inline = [m for m in messages if isinstance(m, dict) and m.get("role") == "system"]
    chat: Json = {"model": request.get("model"), "messages": _system(request.get("system"), inline)}
    for message in messages:
        if not (isinstance(message, dict) and message.get("role") == "system"):
            chat["messages"] += _message(message)
    for source, target in SAMPLING.items():
        if request.get(source) is not None:
            chat[target] = request[source]
    if request.get("stop_sequences"):
        chat["stop"] = list(request["stop_sequences"])
    chat.update(_tools(request.get("tools"), request.get("tool_choice")))
    if request.get("stream"):
        chat["stream"] = True  # usage on every chunk, so message_start carries the prompt's size (as vLLM asks)
        chat["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
        chat["continue_final_message"], chat["add_generation_prompt"] = True, False
    return chat


BILLING_HEADER = "x-anthropic-billing-header"  # Claude Code's first system block: metadata, not an instruction


def _system(system: Any, inline: list[Json]) -> list[Json]:
    """The top-level ``system`` then the ``inline`` system messages' content (each a string or text blocks, whose
    ``cache_control`` is dropped) as at most one system message, their texts joined by newlines."""
    texts: list[str] = []
    for content in [system, *(m.get("content") for m in inline)]:
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"]
    text = "\n".join(t for t in texts if t and not t.startswith(BILLING_HEADER))
    return [{"role": "system", "content": text}] if text else []


def _message(message: Any) -> list[Json]:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise TranslationError("messages: each message must be an object with role 'user' or 'assistant'.")
    role, content = message["role"], message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise TranslationError("messages: content must be a string or a list of content blocks.")
    blocks = [b for b in content if isinstance(b, dict)]
    return _assistant(blocks) if role == "assistant" else _user(blocks)


def _user(blocks: list[Json]) -> list[Json]:
    """Tool results become ``role: tool`` messages, first (OpenAI wants them right after the assistant's
    ``tool_calls``); the text and images that remain, and images found in tool results, one user message."""
    out: list[Json] = []
    parts: list[Json] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "tool_result":
            text, images = _tool_result(block.get("content"))
            out.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text})
            parts += images
        elif kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image" and (image := _image(block)):
            parts.append(image)
    if len(parts) == 1 and parts[0]["type"] == "text":
        out.append({"role": "user", "content": parts[0]["text"]})
    elif parts:
        out.append({"role": "user", "content": parts})
    return out


def _tool_result(content: Any) -> tuple[str, list[Json]]:
    """A tool result's text (a string, or its text blocks joined by newlines) and its images as parts."""
    if isinstance(content, str):
        return content, []
    blocks = [b for b in content or [] if isinstance(b, dict)]
    text = "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    images = [image for b in blocks if b.get("type") == "image" and (image := _image(b))]
    return text, images


def _image(block: Json) -> Json | None:
    """An image block as an ``image_url`` part: base64 sources as a ``data:`` URL, url sources as they are."""
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = str(source.get("url", ""))
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _assistant(blocks: list[Json]) -> list[Json]:
    """Text blocks joined as the content; ``tool_use`` blocks as ``tool_calls`` (content null when only calls)."""
    text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    calls = [
        {
            "id": str(b.get("id", "")),
            "type": "function",
            "function": {"name": str(b.get("name", "")), "arguments": json.dumps(b.get("input") or {})},
        }
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    if not calls:
        return [{"role": "assistant", "content": text}]
    return [{"role": "assistant", "content": text or None, "tool_calls": calls}]


def _tools(tools: Any, choice: Any) -> Json:
    """``tools`` and ``tool_choice`` (and ``parallel_tool_calls``) for the chat request; nothing without tools.

    auto -> "auto", any -> "required", tool -> the named function, none -> "none"; ``disable_parallel_tool_use``
    -> ``parallel_tool_calls: false``. Server tools (a ``type`` other than "custom") are left out.
    """
    functions = [
        {
            "type": "function",
            "function": {
                "name": str(t["name"]),
                **({"description": str(t["description"])} if t.get("description") else {}),
                "parameters": t.get("input_schema") or EMPTY_SCHEMA,
            },
        }
        for t in tools or []
        if isinstance(t, dict) and t.get("name") and t.get("type", "custom") == "custom"
    ]
    if not functions:
        return {}
    out: Json = {"tools": functions}
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind in ("auto", "none"):
            out["tool_choice"] = kind
        elif kind == "any":
            out["tool_choice"] = "required"
        elif kind == "tool":
            out["tool_choice"] = {"type": "function", "function": {"name": str(choice.get("name", ""))}}
        if choice.get("disable_parallel_tool_use"):
            out["parallel_tool_calls"] = False
    return out


def stop_reason(finish_reason: str | None, stop_string: str | None, *, tool_use: bool = False) -> str:
    """The Anthropic ``stop_reason`` for an OpenAI ``finish_reason``.

    tool_calls (or the legacy function_call) -> tool_use; length -> max_tokens; content_filter -> refusal;
    stop with a matched stop string (vLLM's choice ``stop_reason``) -> stop_sequence; anything else ->
    end_turn. ``tool_use`` says tool calls were produced: vLLM answers a forced (named or required) tool
    call with finish_reason "stop", and Anthropic clients only run tools on stop_reason "tool_use".
    """
    if finish_reason in ("tool_calls", "function_call") or (tool_use and finish_reason == "stop"):
        return "tool_use"
    if finish_reason == "length":
        return "max_tokens"
    if finish_reason == "content_filter":
        return "refusal"
    if finish_reason == "stop" and stop_string:
        return "stop_sequence"
    return "end_turn"


def matched_stop(choice: Json) -> str | None:
    """The stop string that ended a choice: vLLM's ``stop_reason`` when it is a string (it is a token id
    when a stop token ended it, and absent on other engines)."""
    value = choice.get("stop_reason")
    return value if isinstance(value, str) and value else None


def message_id(chat_id: Any) -> str:
    """``msg_`` + the chat completion's id without its ``chatcmpl-`` prefix; a random one when there is none."""
    if isinstance(chat_id, str) and chat_id:
        return "msg_" + chat_id.removeprefix("chatcmpl-")
    return "msg_" + uuid.uuid4().hex


def tool_input(arguments: Any) -> Json:
    """A tool call's JSON-string ``arguments`` as the ``input`` object; ``{}`` when they do not parse to one
    (a model's malformed JSON, or arguments cut by max_tokens)."""
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def anthropic_usage(usage: Any) -> Json:
    """``{input_tokens, output_tokens}`` from an OpenAI usage object, with ``cache_read_input_tokens`` from
    ``prompt_tokens_details.cached_tokens`` when the engine reports it.

    As Anthropic defines it and vLLM 0.32's own /v1/messages reports it, the prompt is input_tokens +
    cache_read_input_tokens (+ cache_creation_input_tokens), so input_tokens is the prompt less its
    cached part (gateway.accounting adds them back up).
    """
    usage = usage if isinstance(usage, dict) else {}
    prompt = int(usage.get("prompt_tokens") or 0)
    out: Json = {"input_tokens": prompt, "output_tokens": int(usage.get("completion_tokens") or 0)}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if isinstance(cached, int):
        out["input_tokens"] = max(0, prompt - cached)
        out["cache_read_input_tokens"] = cached
    return out


def reasoning_text(message: Json) -> str | None:
    """A chat message's or delta's reasoning: ``reasoning`` (vLLM ≥ 0.10) or ``reasoning_content`` (SGLang,
    older vLLM)."""
    value = message.get("reasoning")
    if not isinstance(value, str) or not value:
        value = message.get("reasoning_content")
    return value if isinstance(value, str) and value else None


def chat_to_message(response: Json, model: str) -> Json:
    """A non-streamed OpenAI chat completion as an Anthropic message (only the first choice is used).

    Content: a text block when there is text, then one ``tool_use`` block per tool call, whose ``input``
    is ``{}`` when the arguments are not a JSON object. ``model`` is the name the client asked for.
    """
    choices = response.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    content: list[Json] = []
    if thinking := reasoning_text(message):
        content.append({"type": "thinking", "thinking": thinking, "signature": uuid.uuid4().hex})
    if isinstance(message.get("content"), str) and message["content"]:
        content.append({"type": "text", "text": message["content"]})
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    msg_id = message_id(response.get("id"))
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        call_id = call.get("id") or f"toolu_{msg_id.removeprefix('msg_')}_{index}"
        name, arguments = str(function.get("name") or ""), tool_input(function.get("arguments"))
        content.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
    stop_string = matched_stop(choice)
    reason = stop_reason(choice.get("finish_reason"), stop_string, tool_use=bool(calls))
    if not content:  # Anthropic's shape of an empty answer is one empty text block, as vLLM sends it
        content.append({"type": "text", "text": ""})
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": stop_string if reason == "stop_sequence" else None,
        "usage": anthropic_usage(response.get("usage")),
    }
