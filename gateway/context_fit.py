"""Counting a request's prompt with the engine's own tokenizer, and fitting ``max_tokens`` to the context left.

A deployment with "fit max_tokens to the context left" on (``Route.fit_max_tokens``; on for a deployment made
since deployments migration 0011, one made before keeps its setting) answers a request whose
prompt plus output limit is over its max_model_len by lowering the limit to what the context leaves,
instead of the engine's refusal (Claude Code asks for 32,000 output tokens whatever the context,
../shared/FACTS.md). The prompt is counted by the engine's ``POST /tokenize`` (vLLM, the simulator), which
renders it through the model's own chat template; the answer then carries ``x-hearth-max-tokens-fitted``.
A request that surely fits is not counted: a byte-level tokenizer makes at most one token per byte of text,
so a prompt is under FIT_BOUND_FACTOR × its body's bytes plus FIT_BOUND_SLACK tokens of chat-template
framing; only a request whose limit plus that bound is over the context costs a /tokenize call.

/tokenize renders a chat request as the engine's chat API does; a request the engine takes on its own Anthropic or
Responses API is rendered by the engine's conversion of it, which /tokenize cannot be asked for: it is counted as
gateway.rewrite translates it to chat, and fitted with RENDER_MARGIN tokens to spare (a trial's Claude Code turn
counted 4,081 tokens, vLLM's /v1/messages rendered 4,084, and the answer fitted to the count ended at the context's
end, cut with no error).
"""

import asyncio
import json
import logging
from typing import Any

from gateway.registry import Upstream
from gateway.upstream import Engines
from gateway.upstream_errors import UpstreamBroken, UpstreamUnreachable

log = logging.getLogger(__name__)
COUNT_TIMEOUT = 5.0  # seconds a /tokenize call may take before the count is given up
FIT_BOUND_FACTOR = 2  # tokens per body byte, at most (one per byte of text; templates re-render JSON)
FIT_BOUND_SLACK = 1024  # tokens of template framing (roles, special tokens, the tools preamble)
FITTED_HEADER = b"x-hearth-max-tokens-fitted"
RENDER_MARGIN = (100, 16)  # a translated count's spare tokens: 1/100 of the prompt, and 16 more (module docstring)


async def count_prompt(engines: Engines, upstream: Upstream, body: dict[str, Any]) -> int | None:
    """The prompt tokens of a ``/tokenize`` body (gateway.rewrite.tokenize_request) as ``upstream``'s engine
    counts them; None when it cannot say (no such endpoint, an error, no answer in COUNT_TIMEOUT s)."""
    try:
        async with asyncio.timeout(COUNT_TIMEOUT):
            payload = json.dumps(body).encode()
            answer = await engines.post(
                upstream.base_url, "/tokenize", upstream.engine_api_key, payload, external=upstream.external
            )
            async with answer:
                data = await answer.read()
    except (TimeoutError, UpstreamUnreachable, UpstreamBroken) as exc:
        log.warning("could not count a prompt on replica %s: %s", upstream.replica_id, exc)
        return None
    if answer.status != 200:
        return None
    try:
        count = json.loads(data).get("count")
    except (ValueError, AttributeError):
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


async def prompt_at_most(
    engines: Engines, upstream: Upstream | None, body: dict[str, Any] | None, body_bytes: int
) -> tuple[int, int | None]:
    """(at most, counted): both the prompt's tokens as ``upstream``'s engine counts the ``/tokenize`` body; else (no
    body, no upstream, no count) the bound a request of ``body_bytes`` bytes cannot exceed, and None."""
    counted = await count_prompt(engines, upstream, body) if body and upstream else None
    return (prompt_bound(body_bytes) if counted is None else counted), counted


def prompt_bound(body_bytes: int) -> int:
    """Tokens a prompt of ``body_bytes`` bytes of JSON cannot exceed (module docstring)."""
    return FIT_BOUND_FACTOR * body_bytes + FIT_BOUND_SLACK


def may_overflow(asked: int, body_bytes: int, max_model_len: int) -> bool:
    """Whether a prompt of ``body_bytes`` bytes of JSON plus ``asked`` output tokens might not fit (module
    docstring); False means it surely fits and needs no count."""
    return asked + prompt_bound(body_bytes) > max_model_len


def fitted_limit(asked: int, prompt: int, max_model_len: int, translated: bool = False) -> int | None:
    """The output limit that fits ``prompt`` tokens in ``max_model_len`` (less RENDER_MARGIN where the count is
    of a ``translated`` rendering: module docstring, at least one token), when ``asked`` is over it and at least one
    token is left; None when nothing needs changing or nothing can be done (the engine then refuses the prompt
    itself, with its own numbers)."""
    left = max_model_len - prompt
    if translated:
        share, spare = RENDER_MARGIN
        left = min(left, max(1, left - prompt // share - spare))
    if asked <= left or left < 1:
        return None
    return left


def fitted_header(asked: int, fitted: int, prompt: int, max_model_len: int) -> tuple[bytes, bytes]:
    """The response header saying the output limit was lowered, and from what: ``spare`` the tokens kept for the
    engine's own rendering where it was counted translated (RENDER_MARGIN), e.g. ``2001; requested=32000;
    prompt=31; max_model_len=2048; spare=16``."""
    value = f"{fitted}; requested={asked}; prompt={prompt}; max_model_len={max_model_len}"
    spare = max_model_len - prompt - fitted
    return FITTED_HEADER, (value + (f"; spare={spare}" if spare > 0 else "")).encode()
