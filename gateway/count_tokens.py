"""``POST /v1/messages/count_tokens`` answered whatever the engine: its own count where it gives one (vLLM's
count_tokens, or its ``/tokenize`` behind the translation to the chat API), else an estimate, said so in the
``x-hearth-tokens-estimated: true`` header. Claude Code counts tokens before it sends a conversation; a 404 there
stops it, where an estimate lets it go on (the engine still refuses a prompt that does not fit, with its numbers).

The engine cannot count when it has no such endpoint (404, 405, 501: an OpenAI-only server, llama.cpp, an older
vLLM) or answers it with something that is no count (gateway.whole_answer's 502 ``upstream_invalid``, or
``upstream_not_json``), or refuses the prompt as longer than its context (then the estimate is at least
max_model_len + 1: the client learns it is over, which is why it counted). Any other answer (a 400 for a bad
request, an engine that is down) is the client's as it is.

The estimate: the prompt as the translation to the chat API renders it (``messages`` with the top-level ``system``
first, ``tools`` as functions), its JSON's UTF-8 bytes over BYTES_PER_TOKEN, plus MESSAGE_FRAMING tokens a message.
"""

import json
import math
from collections.abc import Mapping
from typing import Any

from gateway.asgi_io import Send
from gateway.errors import CONTEXT_LENGTH
from gateway.rewrite import tokenize_request

COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
ESTIMATED_HEADER = (b"x-hearth-tokens-estimated", b"true")
NO_COUNT_STATUSES = frozenset({404, 405, 501})  # the engine has no such endpoint
NO_COUNT_CODES = frozenset({"upstream_invalid", "upstream_not_json"})  # it answered, but with no count
# ~4 characters of English a token (OpenAI's "What are tokens and how to count them"); code and JSON run nearer
# 3 on BPE tokenizers, so 3 bytes errs high, which a client deciding whether a conversation fits would rather.
BYTES_PER_TOKEN = 3
# Tokens of a chat template's framing per message (role markers, separators): 3 in OpenAI's cookbook "How to count
# tokens with tiktoken" for its chat models, one more here for templates with longer markers.
MESSAGE_FRAMING = 4


def cannot_count(status: int, code: str | None = None) -> bool:
    """Whether an engine's answer of ``status`` (a gateway error's ``code``) means it cannot count tokens."""
    return status in NO_COUNT_STATUSES or (status == 502 and code in NO_COUNT_CODES)


def estimate(request: Mapping[str, Any]) -> int:
    """The estimated input tokens of a count_tokens ``request`` (module docstring), at least 1."""
    prompt = tokenize_request(COUNT_TOKENS_PATH, dict(request)) or {"messages": [request.get("messages")]}
    rendered = json.dumps([prompt.get("messages"), prompt.get("tools")], ensure_ascii=False).encode()
    messages = prompt.get("messages")
    framing = MESSAGE_FRAMING * (len(messages) if isinstance(messages, list) else 1)
    return max(1, math.ceil(len(rendered) / BYTES_PER_TOKEN) + framing)


def estimated_body(request: Mapping[str, Any], at_least: int = 1) -> bytes:
    """Anthropic's count_tokens answer, ``{"input_tokens": N}``, with the estimate, ``at_least`` that."""
    return json.dumps({"input_tokens": max(estimate(request), at_least)}).encode()


class HeldAnswer:
    """A ``send`` that keeps a whole answer (its head and body) instead of sending it: ``status`` is its head's
    status (0 before it), ``release`` sends what it kept. ``over_context``: the answer is the engine's refusal of
    a prompt longer than its context (gateway.errors.CONTEXT_LENGTH; vLLM's count_tokens refuses one, "at least
    8193 input tokens", where a client counts precisely to learn it is over); ``at_least`` then the count it
    implies, ``max_model_len`` + 1 (else 1)."""

    def __init__(self, max_model_len: int) -> None:
        self.status, self.messages, self.max_model_len = 0, list[Mapping[str, Any]](), max_model_len
        self.over_context = False

    async def __call__(self, message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif self.status == 400 and CONTEXT_LENGTH.search(bytes(message.get("body", b"")).decode("utf-8", "replace")):
            self.over_context = True
        self.messages.append(message)

    @property
    def at_least(self) -> int:
        return self.max_model_len + 1 if self.over_context and self.max_model_len else 1

    async def release(self, send: Send) -> None:
        for message in self.messages:
            await send(message)
