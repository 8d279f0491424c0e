"""How the gateway changes a request on its way to the engine: usage asked for, the output-token limit spelled
as the engine reads it and capped, and translations to the chat API for engines without Anthropic's
Messages or OpenAI's Responses API. Pure functions on the parsed request.
"""

import json
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, TypeGuard

from gateway.responses_chat import responses_to_chat
from gateway.translate import TranslationError, messages_to_chat

USAGE_ENDPOINTS = {"/v1/chat/completions", "/v1/completions"}

# Where each endpoint takes its output-token limit; the first present wins (OpenAI: max_completion_tokens
# over the deprecated max_tokens).
MAX_TOKENS_FIELDS = {
    "/v1/chat/completions": ("max_completion_tokens", "max_tokens"),
    "/v1/completions": ("max_tokens",),
    "/v1/responses": ("max_output_tokens",),
    "/v1/messages": ("max_tokens",),
}


def ask_for_usage(path: str, request: dict[str, Any]) -> dict[str, Any]:
    """The field that makes a stream end with a usage chunk (OpenAI ``stream_options.include_usage``), so every
    request is accounted; empty when the client asked for it itself. When it is set, the relay strips the
    usage chunk again."""
    if path not in USAGE_ENDPOINTS or not request.get("stream"):
        return {}
    options = request.get("stream_options") or {}
    if options.get("include_usage"):
        return {}
    return {"stream_options": {**options, "include_usage": True}}


def engine_spelling(path: str, request: dict[str, Any]) -> dict[str, int]:
    """The output-token limit in the field the engine reads, when the client spelled it otherwise.

    /v1/completions: vLLM's and SGLang's completions read only ``max_tokens`` (OpenAI's default of 16
    applies without it: vllm/entrypoints/openai/completion/protocol.py), so a client's
    ``max_completion_tokens`` (the chat API's newer name, which some SDKs and clients send everywhere)
    becomes ``max_tokens``. The other endpoints' engines read the client's own field."""
    if path != "/v1/completions" or request.get("max_tokens") is not None:
        return {}
    value = request.get("max_completion_tokens")
    return {"max_tokens": value} if _whole(value) else {}


def output_limit(path: str, request: dict[str, Any]) -> tuple[str, int | None] | None:
    """(field, value) of the most the request may generate, in tokens, or None for an endpoint without a limit.

    Of the endpoint's limit fields the request holds, the largest (engines differ on which they read: vLLM the
    first, SGLang ``max_completion_tokens or max_tokens``); value None when it holds none (the endpoint's first
    field) or one that is not an integer."""
    fields = MAX_TOKENS_FIELDS.get(path)
    if fields is None:
        return None
    held = {name: request[name] for name in fields if request.get(name) is not None}
    if not held:
        return fields[0], None
    unread = next((name for name, value in held.items() if not _whole(value)), None)
    if unread is not None:
        return unread, None
    name = max(held, key=held.__getitem__)
    return name, held[name]


def cap_max_tokens(path: str, request: dict[str, Any], cap: int | None) -> dict[str, int]:
    """Each output-token limit field the request holds, lowered to ``cap`` when over it or not an integer (the
    endpoint's first field set to ``cap`` when it holds none); empty when the request is within it.

    Every field is capped, not only the first: SGLang's chat API generates
    ``max_completion_tokens or max_tokens`` tokens (sglang/srt/entrypoints/openai/serving_chat.py, 0.5.15), so a
    request with ``max_completion_tokens: 0`` and a ``max_tokens`` over the cap would otherwise get the latter."""
    fields = MAX_TOKENS_FIELDS.get(path)
    if cap is None or fields is None:
        return {}
    held = [name for name in fields if request.get(name) is not None]
    if not held:
        return {fields[0]: cap}
    return {name: cap for name in held if not _at_most(request[name], cap)}


CAPPED_HEADER = b"x-hearth-max-tokens-capped"


def capped_header(asked: int | None, cap: int, by: str) -> tuple[bytes, bytes]:
    """The response header saying a cap lowered the output limit, or set it where the request had none:
    ``16; requested=100; cap=key`` (``requested=none``; ``cap`` is ``key`` or ``deployment``, whose cap it was, or
    ``limit`` or ``budget``: what the key's token limits or budgets leave, gateway.quotas.output_within_limit)."""
    return CAPPED_HEADER, f"{cap}; requested={'none' if asked is None else asked}; cap={by}".encode()


def capped_to(headers: Iterable[tuple[bytes, bytes]]) -> tuple[int, str] | None:
    """The output limit the last ``capped_header`` among ``headers`` set and whose cap it was (``(16, "key")``);
    None when no cap applied."""
    found = [value for name, value in headers if name == CAPPED_HEADER]
    if not found:
        return None
    limit, _, by = found[-1].decode().partition("; ")
    return int(limit), by.rpartition("cap=")[2]


def _at_most(value: object, cap: int) -> bool:
    return _whole(value) and value <= cap


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def with_fields(body: bytes, request: dict[str, Any], fields: dict[str, Any]) -> bytes:
    """``body``, the JSON text of ``request``, with ``fields`` set at its top level (in ``request`` too).

    When none of them is in the request yet they are appended to the text, so a long conversation is not
    encoded again (a UTF-8 body only; JSON in UTF-16 or UTF-32 is re-encoded); otherwise the whole request
    is encoded again, as it is whenever a field already present changes."""
    fresh = not any(name in request for name in fields)
    request.update(fields)
    head = body.rstrip()
    if fresh and body.lstrip()[:1] == b"{" and head.endswith(b"}"):
        return head[:-1] + b"," + json.dumps(fields)[1:-1].encode() + b"}"
    return json.dumps(request).encode()


class Translation(StrEnum):
    """How the engine's answer reaches a client whose API the engine does not serve."""

    NONE = "none"
    MESSAGES = "messages"  # chat completions → Anthropic messages (gateway.translate)
    COUNT_TOKENS = "count_tokens"  # the engine's /tokenize count → {"input_tokens"}
    RESPONSES = "responses"  # chat completions → OpenAI responses (gateway.responses_chat)


def translate_for_chat_engine(path: str, request: dict[str, Any]) -> tuple[str, dict[str, Any], Translation]:
    """(engine path, engine request, translation) for an Anthropic or Responses request to an engine that only
    speaks OpenAI's chat API. Raises TranslationError for requests that cannot be translated."""
    if path == "/v1/responses":
        return "/v1/chat/completions", responses_to_chat(request), Translation.RESPONSES
    chat = messages_to_chat(request)
    if path == "/v1/messages" and (not isinstance(request.get("max_tokens"), int) or request["max_tokens"] < 1):
        raise TranslationError("max_tokens: a positive integer is required, as Anthropic's API requires it.")
    if path == "/v1/messages/count_tokens":
        tokenize = {"model": chat["model"], "messages": chat["messages"], "tools": chat.get("tools")}
        return "/tokenize", {k: v for k, v in tokenize.items() if v is not None}, Translation.COUNT_TOKENS
    return "/v1/chat/completions", chat, Translation.MESSAGES


# A chat request's fields that change how the engine renders its prompt, which vLLM's TokenizeChatRequest takes too
# (a reasoning model's chat_template_kwargs {"enable_thinking": false} renders other tokens than without it).
TEMPLATE_FIELDS = (
    "add_generation_prompt",
    "continue_final_message",
    "add_special_tokens",
    "chat_template",
    "chat_template_kwargs",
)


def tokenize_request(path: str, request: dict[str, Any]) -> dict[str, Any] | None:
    """The body of a POST /tokenize (vLLM's TokenizeChatRequest or TokenizeCompletionRequest,
    vllm/entrypoints/serve/tokenize/protocol.py) that counts ``request``'s prompt as the engine renders it, with
    the chat request's TEMPLATE_FIELDS; None when it has none the engine can count (embeddings, a prompt of token
    ids)."""
    try:
        if path == "/v1/completions":
            prompt = request.get("prompt")
            return {"model": request.get("model"), "prompt": prompt} if isinstance(prompt, str) else None
        if path == "/v1/chat/completions":
            chat = request
        elif path == "/v1/responses":
            chat = responses_to_chat(request)
        elif path in ("/v1/messages", "/v1/messages/count_tokens"):
            chat = messages_to_chat(request)
        else:
            return None
    except TranslationError:
        return None
    body = {name: chat.get(name) for name in ("model", "messages", "tools", *TEMPLATE_FIELDS)}
    return {k: v for k, v in body.items() if v is not None} if isinstance(body["messages"], list) else None
