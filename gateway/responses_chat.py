"""OpenAI Responses requests to chat-completions requests, and chat answers back, for engines without
/v1/responses (SGLang, vLLM before 0.10). The streamed answer is translated by ``responses_chat_stream``.

Pure functions on parsed JSON. Shapes follow the Responses API reference
(https://platform.openai.com/docs/api-reference/responses/create and .../responses/object) and, where it
says more, vLLM 0.32's own /v1/responses (vllm/entrypoints/openai/responses/{utils,serving,protocol}.py and
vllm/tool_parsers/utils.py), which this translation mirrors:

- ``instructions`` and every ``system`` or ``developer`` message become the one leading system message
  (chat templates refuse system messages elsewhere, and know no ``developer`` role); a string ``input`` is
  one user message; ``message`` items keep their role and their ``input_text``/``output_text`` parts
  (``input_image`` as an ``image_url`` part); ``function_call`` items become the assistant's ``tool_calls``
  (merged into the assistant message before them, as vLLM merges them), ``function_call_output`` items
  ``role: tool`` messages; ``custom_tool_call`` items a call of the custom tool's shim with arguments
  ``{"input": ...}``; ``reasoning`` items and built-in tool calls are left out, and an item of another type
  is refused as vLLM refuses it ("Unsupported input item type").
- Tools: ``function`` tools as chat functions; ``custom`` tools as a function taking one string ``input``;
  the functions of a ``namespace`` tool flattened to ``<namespace>__<name>``; built-in tools (web search,
  file search, ...) left out, since the engine cannot run them.
- ``max_output_tokens`` → ``max_tokens``; ``text.format`` → ``response_format``; ``reasoning.effort`` →
  ``reasoning_effort``; ``previous_response_id`` is refused (no stored responses behind a chat engine).
- Answers: reasoning (``reasoning``/``reasoning_content``) → a ``reasoning`` item with ``reasoning_text``
  content, then the text as a ``message`` item, then one ``function_call`` item per tool call; finish
  ``length`` → status ``incomplete`` with ``incomplete_details.reason: max_output_tokens``; usage as
  ``input_tokens``/``output_tokens`` with ``cached_tokens`` and ``reasoning_tokens`` details.
"""

import json
import time
import uuid
from typing import Any

from gateway.translate import Json, TranslationError, reasoning_text

NAMESPACE_SEPARATOR = "__"  # vllm/tool_parsers/utils.py flat_namespace_tool_name
CUSTOM_INPUT_KEY = "input"  # vllm/tool_parsers/utils.py CUSTOM_TOOL_INPUT_KEY
CUSTOM_PARAMETERS: Json = {
    "type": "object",
    "properties": {CUSTOM_INPUT_KEY: {"type": "string", "description": "The freeform text payload for this tool."}},
    "required": [CUSTOM_INPUT_KEY],
    "additionalProperties": False,
}
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
# Items a chat engine has no use for: reasoning, and the calls of built-in tools it cannot run.
SKIPPED_ITEMS = frozenset(
    {
        "reasoning",
        "item_reference",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "image_generation_call",
        "code_interpreter_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
    }
)
SAMPLING = ("temperature", "top_p", "parallel_tool_calls", "user")


def responses_to_chat(request: Json) -> Json:
    """A Responses request as a chat-completions request for the same ``model`` (module docstring).

    Raises TranslationError for an ``input`` that is neither a string nor a list of items, an item of an
    unknown shape, or a ``previous_response_id``."""
    if request.get("previous_response_id"):
        raise TranslationError("previous_response_id: this engine keeps no responses; send the whole conversation.")
    raw = request.get("input")
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise TranslationError("input: must be a string or a non-empty list of items.")
    system = [request["instructions"]] if isinstance(request.get("instructions"), str) else []
    messages: list[Json] = []
    for item in raw:
        _item(item, messages, system)
    text = "\n".join(t for t in system if t)
    chat: Json = {"model": request.get("model"), "messages": ([{"role": "system", "content": text}] if text else [])}
    chat["messages"] += messages
    chat.update({k: request[k] for k in SAMPLING if request.get(k) is not None})
    if isinstance(request.get("max_output_tokens"), int):
        chat["max_tokens"] = request["max_output_tokens"]
    chat.update(_tools(request.get("tools"), request.get("tool_choice")))
    if (effort := (request.get("reasoning") or {}).get("effort")) in ("low", "medium", "high"):
        chat["reasoning_effort"] = effort
    if response_format := _format((request.get("text") or {}).get("format")):
        chat["response_format"] = response_format
    if request.get("stream"):
        chat["stream"], chat["stream_options"] = True, {"include_usage": True, "continuous_usage_stats": True}
    return chat


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and p.get("type") in TEXT_PARTS)


def _parts(content: Any) -> str | list[Json]:
    """A message's content as chat content: its text, or text and image parts when it has images."""
    if isinstance(content, str) or not any(isinstance(p, dict) and p.get("type") == "input_image" for p in content):
        return _text(content)
    parts: list[Json] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in TEXT_PARTS:
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif isinstance(part, dict) and part.get("type") == "input_image" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
    return parts


def _item(item: Any, messages: list[Json], system: list[str]) -> None:
    if not isinstance(item, dict):
        raise TranslationError("input: each item must be an object.")
    kind = item.get("type", "message")
    if kind == "message" or (kind is None and "role" in item):
        role = item.get("role")
        if role in ("system", "developer"):
            system.append(_text(item.get("content")))
        elif role in ("user", "assistant") and isinstance(item.get("content"), (str, list)):
            messages.append({"role": role, "content": _parts(item["content"])})
        else:
            raise TranslationError("input: a message needs role user, assistant, system or developer, and content.")
    elif kind in ("function_call", "custom_tool_call"):
        arguments = item.get("arguments")
        if kind == "custom_tool_call":
            arguments = json.dumps({CUSTOM_INPUT_KEY: item.get("input")})
        name = str(item.get("name") or "")
        if item.get("namespace"):
            name = f"{item['namespace']}{NAMESPACE_SEPARATOR}{name}"
        call = {
            "id": str(item.get("call_id") or ""),
            "type": "function",
            "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else "{}"},
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        messages.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""), "content": _text(output)})
    elif kind not in SKIPPED_ITEMS:
        raise TranslationError(f"Unsupported input item type: {kind}")  # vLLM's own words for it


def _tools(tools: Any, choice: Any) -> Json:
    functions: list[Json] = []
    for tool in tools or []:
        if not isinstance(tool, dict) or not tool.get("name"):
            continue
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and inner.get("type") == "function" and inner.get("name"):
                    functions.append(_function(f"{tool['name']}{NAMESPACE_SEPARATOR}{inner['name']}", inner))
        elif tool.get("type") == "function":
            functions.append(_function(str(tool["name"]), tool))
        elif tool.get("type") == "custom":
            functions.append(_function(str(tool["name"]), {**tool, "parameters": CUSTOM_PARAMETERS}))
    if not functions:
        return {}
    out: Json = {"tools": functions}
    if choice in ("auto", "none", "required"):
        out["tool_choice"] = choice
    elif isinstance(choice, dict) and choice.get("type") in ("function", "custom") and choice.get("name"):
        out["tool_choice"] = {"type": "function", "function": {"name": str(choice["name"])}}
    return out


def _function(name: str, tool: Json) -> Json:
    function: Json = {"name": name, "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
    if tool.get("description"):
        function["description"] = str(tool["description"])
    return {"type": "function", "function": function}


def _format(fmt: Any) -> Json | None:
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    return {"type": "json_object"} if fmt.get("type") == "json_object" else None


def tool_names(request: Json) -> tuple[frozenset[str], dict[str, tuple[str, str]]]:
    """The request's custom tool names, and flattened namespace names → (namespace, name)."""
    custom: set[str] = set()
    spaced: dict[str, tuple[str, str]] = {}
    for tool in request.get("tools") or []:
        if isinstance(tool, dict) and tool.get("type") == "custom" and tool.get("name"):
            custom.add(str(tool["name"]))
        elif isinstance(tool, dict) and tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and inner.get("name"):
                    spaced[f"{tool['name']}{NAMESPACE_SEPARATOR}{inner['name']}"] = (tool["name"], inner["name"])
    return frozenset(custom), spaced


def call_item(request: Json, call_id: str, name: str, arguments: str) -> Json:
    """The output item of a finished tool call: a ``function_call`` (with its ``namespace`` when the name is a
    flattened one) or, for a custom tool, a ``custom_tool_call`` with the shim's ``input``."""
    custom, spaced = tool_names(request)
    if name in custom:
        try:
            payload = json.loads(arguments).get(CUSTOM_INPUT_KEY)
        except (ValueError, AttributeError):
            payload = None
        text = payload if isinstance(payload, str) else arguments
        return {
            "type": "custom_tool_call",
            "id": f"ctc_{uuid.uuid4().hex}",
            "call_id": call_id,
            "name": name,
            "input": text,
            "status": "completed",
        }
    namespace, short = spaced.get(name, (None, name))
    item: Json = {
        "type": "function_call",
        "id": f"fc_{uuid.uuid4().hex}",
        "call_id": call_id,
        "name": short,
        "arguments": arguments,
        "status": "completed",
    }
    if namespace:
        item["namespace"] = namespace
    return item


def response_usage(usage: Any) -> Json | None:
    """A chat usage object in the Responses shape (vLLM's ResponseUsage)."""
    if not isinstance(usage, dict):
        return None
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "output_tokens": completion,
        "total_tokens": prompt + completion,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens_details": {"reasoning_tokens": reasoning},
    }


def response_object(request: Json, model: str, response_id: str, output: list[Json], status: str) -> Json:
    """The response object around ``output``, echoing the request's settings as vLLM's from_request does."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": status,
        "output": output,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.get("instructions"),
        "metadata": request.get("metadata"),
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "temperature": request.get("temperature"),
        "top_p": request.get("top_p"),
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "max_output_tokens": request.get("max_output_tokens"),
        "previous_response_id": None,
        "reasoning": request.get("reasoning"),
        "text": request.get("text"),
        "truncation": "disabled",
        "background": False,
        "service_tier": "auto",
        "user": request.get("user"),
        "usage": None,
    }


def response_id(chat_id: Any) -> str:
    """``resp_`` + the chat completion's id without its ``chatcmpl-`` prefix; a random one when there is none."""
    if isinstance(chat_id, str) and chat_id:
        return "resp_" + chat_id.removeprefix("chatcmpl-")
    return "resp_" + uuid.uuid4().hex


def chat_to_response(answer: Json, request: Json, model: str) -> Json:
    """A non-streamed chat completion as a Responses response object (first choice only)."""
    choices = answer.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    output: list[Json] = []
    if thinking := reasoning_text(message):
        output.append(
            {
                "type": "reasoning",
                "id": f"rs_{uuid.uuid4().hex}",
                "summary": [],
                "status": None,
                "content": [{"type": "reasoning_text", "text": thinking}],
            }
        )
    if isinstance(message.get("content"), str) and message["content"]:
        part = {"type": "output_text", "text": message["content"], "annotations": [], "logprobs": None}
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex}",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    for index, call in enumerate(c for c in message.get("tool_calls") or [] if isinstance(c, dict)):
        function = call.get("function") or {}
        call_id = str(call.get("id") or f"call_{uuid.uuid4().hex[:24]}_{index}")
        arguments = function["arguments"] if isinstance(function.get("arguments"), str) else "{}"
        output.append(call_item(request, call_id, str(function.get("name") or ""), arguments))
    status = "incomplete" if choice.get("finish_reason") == "length" else "completed"
    response = response_object(request, model, response_id(answer.get("id")), output, status)
    response["usage"] = response_usage(answer.get("usage"))
    return response
