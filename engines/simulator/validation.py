"""Checks of a request's messages, tools and stop strings, made before anything is tokenized.

A malformed part is refused with an HTTP 400 that names it (``messages.0.content``), never left to fail later as
a 500, which Hearth would count as a service error. What is refused follows vLLM 0.32.0: its request models
refuse a wrong type in pydantic's words (``common.validation_error``: "1 validation error:", param
``body.<where>``); its chat parser (vllm/entrypoints/chat_utils.py, ``MM_PARSER_MAP``) refuses a content part of
a type it does not know; its Anthropic request model (vllm/entrypoints/anthropic/protocol.py) allows the roles
"user", "assistant" and "system" (Claude Code sends its environment as one; its "ctx" and "msg" read as "user") and
its block types. An OpenAI message may carry any string role, as vLLM's ``CustomChatCompletionMessageParam``
("Enables custom roles in the Chat Completion API") allows, and a null content only as an assistant's (or a
legacy function's) message: vLLM 0.32.0 refuses a user's null content with a 400
(tests/data/vllm-0.32.0-cpu-union-errors.json). Strings holding a lone surrogate are refused for the whole body by
``common.read_json``.
"""

from typing import Any

from engines.simulator.common import APIError, validation_error

# vLLM 0.32.0's chat_utils.MM_PARSER_MAP: the part types its chat parser reads
OPENAI_PART_TYPES = frozenset(
    {
        "text",
        "thinking",
        "input_text",
        "output_text",
        "input_image",
        "image_url",
        "image_embeds",
        "audio_embeds",
        "video_embeds",
        "prompt_embeds",
        "image_pil",
        "audio_url",
        "input_audio",
        "refusal",
        "video_url",
        "tool_reference",
    }
)
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
NULLABLE_ROLES = ("assistant", "function")  # OpenAI's message shapes whose content may be null
# vLLM's AnthropicContentBlock.type (a Literal; 0.32.0's, and the newer tool_reference)
ANTHROPIC_BLOCK_TYPES = (
    "text",
    "image",
    "tool_use",
    "tool_result",
    "document",
    "container_upload",
    "thinking",
    "redacted_thinking",
    "tool_reference",
)
# vLLM's AnthropicMessage.role: user, assistant and system (Claude Code 2.1.328 sends its environment as a system
# message on every request), with Claude Code's "ctx" and "msg" read as user (its normalize_role)
ANTHROPIC_ROLES = ("user", "assistant", "system", "ctx", "msg")


def _missing(where: str, holder: dict[str, Any]) -> APIError:
    """pydantic's "Field required" for ``where``, its input written as vLLM abbreviates a dict."""
    return validation_error(where, "missing", "Field required", f"<dict of {len(holder)} items>")


def _literal(choices: tuple[str, ...]) -> str:
    """pydantic's words for a Literal: "Input should be 'a', 'b' or 'c'"."""
    quoted = [f"'{c}'" for c in choices]
    return "Input should be " + (", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0])


def _message_list(messages: Any) -> list[dict[str, Any]]:
    """``messages`` if a non-empty list of objects; raises APIError 400 otherwise."""
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise APIError(400, "messages must be a non-empty list of message objects.", param="messages")
    return messages


def _role(message: dict[str, Any], where: str) -> str:
    """The message's role; raises APIError 400 when it is absent or not a string."""
    if "role" not in message:
        raise _missing(f"{where}.role", message)
    role = message["role"]
    if not isinstance(role, str):
        raise validation_error(f"{where}.role", "string_type", "Input should be a valid string", role)
    return role


def _check_parts(parts: list[Any], where: str) -> None:
    """OpenAI content parts: each a string (vLLM reads it as text) or an object whose ``type`` is one of
    OPENAI_PART_TYPES, a text part with a string ``text``. Raises APIError 400 naming the first bad part
    (``where.N``)."""
    for index, part in enumerate(parts):
        at = f"{where}.{index}"
        if isinstance(part, str):
            continue
        if not isinstance(part, dict):
            raise validation_error(at, "dict_type", "Input should be a valid dictionary", part)
        if "type" not in part:
            raise _missing(f"{at}.type", part)
        kind = part["type"]
        if not isinstance(kind, str):
            raise validation_error(f"{at}.type", "string_type", "Input should be a valid string", kind)
        if kind not in OPENAI_PART_TYPES:
            raise APIError(400, f"Unknown part type: {kind} (at {at}.type)", param=f"{at}.type")
        if kind in TEXT_PART_TYPES and not isinstance(part.get("text"), str):
            if "text" not in part:
                raise _missing(f"{at}.text", part)
            raise validation_error(f"{at}.text", "string_type", "Input should be a valid string", part["text"])


def check_content(content: Any, where: str, nullable: bool) -> None:
    """An OpenAI message's content: a string, a list of parts (_check_parts), or null where ``nullable``. Raises
    APIError 400."""
    if isinstance(content, str) or (content is None and nullable):
        return
    if not isinstance(content, list):
        message = "Input should be a valid string or a list of content parts"
        raise validation_error(where, "string_type", message, content)
    _check_parts(content, where)


def check_messages(messages: Any) -> list[dict[str, Any]]:
    """An OpenAI chat request's ``messages``, returned once each has a string role and, if any, a valid content
    (check_content; null only in NULLABLE_ROLES). Raises APIError 400 naming the first bad part
    (``messages.N.content``)."""
    checked = _message_list(messages)
    for index, message in enumerate(checked):
        role = _role(message, f"messages.{index}")
        if "content" in message:
            check_content(message["content"], f"messages.{index}.content", nullable=role in NULLABLE_ROLES)
    return checked


def check_tools(tools: Any) -> None:
    """``tools``: null or a list of objects. Raises APIError 400 naming the first bad one."""
    if tools is None:
        return
    if not isinstance(tools, list):
        raise validation_error("tools", "list_type", "Input should be a valid list", tools)
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise validation_error(f"tools.{index}", "dict_type", "Input should be a valid dictionary", tool)


def check_stop(stop: Any, name: str = "stop", alone: bool = True) -> None:
    """``stop`` (or Anthropic's ``stop_sequences``, ``alone`` False): null, a list of strings, or (``alone``) one
    string. Raises APIError 400 naming the field or the bad item."""
    if stop is None or (alone and isinstance(stop, str)):
        return
    if not isinstance(stop, list):
        words = "a valid string or a list of strings" if alone else "a valid list"
        raise validation_error(name, "string_type" if alone else "list_type", f"Input should be {words}", stop)
    for index, item in enumerate(stop):
        if not isinstance(item, str):
            raise validation_error(f"{name}.{index}", "string_type", "Input should be a valid string", item)


def check_chat(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat completion request's ``messages`` (returned), ``tools`` and ``stop``; raises APIError 400."""
    messages = check_messages(body.get("messages"))
    check_tools(body.get("tools"))
    check_stop(body.get("stop"))
    return messages


def _check_blocks(content: Any, where: str) -> None:
    """Anthropic content: a string or a list of blocks whose ``type`` (default "text") is one of
    ANTHROPIC_BLOCK_TYPES, a text block's ``text`` a string. Raises APIError 400 naming the first bad block."""
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        message = "Input should be a valid string or a list of content blocks"
        raise validation_error(where, "string_type", message, content)
    for index, block in enumerate(content):
        at = f"{where}.{index}"
        if not isinstance(block, dict):
            raise validation_error(at, "model_type", "Input should be a valid dictionary", block)
        kind = block.get("type", "text")
        if kind not in ANTHROPIC_BLOCK_TYPES:
            raise validation_error(f"{at}.type", "literal_error", _literal(ANTHROPIC_BLOCK_TYPES), kind)
        text = block.get("text")
        if text is not None and not isinstance(text, str):
            raise validation_error(f"{at}.text", "string_type", "Input should be a valid string", text)


def check_anthropic(body: dict[str, Any]) -> list[dict[str, Any]]:
    """An Anthropic Messages request's ``messages`` (returned: each with one of ANTHROPIC_ROLES and content
    as _check_blocks wants), ``system`` (null or as content), ``tools`` and ``stop_sequences``; raises APIError
    400 naming the first bad part."""
    messages = _message_list(body.get("messages"))
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        role = _role(message, where)
        if role not in ANTHROPIC_ROLES:
            raise validation_error(f"{where}.role", "literal_error", _literal(ANTHROPIC_ROLES), role)
        if "content" not in message:
            raise _missing(f"{where}.content", message)
        _check_blocks(message["content"], f"{where}.content")
    if body.get("system") is not None:
        _check_blocks(body["system"], "system")
    check_tools(body.get("tools"))
    check_stop(body.get("stop_sequences"), "stop_sequences", alone=False)
    return messages
