"""/v1/completions in vLLM's OpenAI-compatible shapes, streaming and not: one chunk per token, the last of each choice
with its ``finish_reason`` ("abort" for one the engine aborted, a sleep with mode=abort), then ``data: [DONE]``."""

import time
from typing import Any

from aiohttp import web

from engines.simulator import textgen, tokenizer, validation
from engines.simulator.common import (
    STATE,
    APIError,
    Dropped,
    budget,
    check_model,
    check_sampling,
    new_id,
    paced,
    read_json,
    reply,
    request_faults,
    send,
    settled,
    start_sse,
    strike,
    usage,
)
from engines.simulator.faults import Faults
from engines.simulator.jobs import Job
from engines.simulator.openai_api import choice_count, consume, end_stream, plan_text, submit


def _prompts(body: dict[str, Any]) -> list[tuple[str, list[int]]]:
    """(text, ids) per prompt: a string, a list of strings, a list of ids or a list of id lists."""
    raw = body.get("prompt")
    if isinstance(raw, str):
        raw = [raw]
    if isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise APIError(400, "prompt must be a string, a list of strings or a list of token ids.", param="prompt")
    out: list[tuple[str, list[int]]] = []
    for item in raw:
        if isinstance(item, str):
            out.append((item, tokenizer.encode(item)))
        elif isinstance(item, list) and all(isinstance(t, int) for t in item):
            out.append((str(item), list(item)))
        else:
            raise APIError(400, "prompt must be a string, a list of strings or a list of token ids.", param="prompt")
    return out


async def completions(request: web.Request) -> web.StreamResponse:
    """POST /v1/completions: choice index = prompt number × n + sample number."""
    state = request.app[STATE]
    body = await read_json(request)
    model = check_model(state, body.get("model"))
    check_sampling(body)
    validation.check_stop(body.get("stop"))
    prompts = _prompts(body)
    faults = request_faults(request, prompts[-1][0])
    n = choice_count(body)
    longest = max(len(ids) for _, ids in prompts)
    max_tokens = budget(state.cfg, longest, body.get("max_tokens", 16), faults.context_length)  # OpenAI's default 16
    plans = [(text, ids, i) for text, ids in prompts for i in range(n)]
    outputs = [plan_text(state, body, text, i, max_tokens) for text, _, i in plans]
    job = submit(state, [ids for _, ids, _ in plans], outputs, body)
    prompt_tokens = sum(len(ids) for _, ids in prompts)
    head = {"id": new_id("cmpl-"), "object": "text_completion", "created": int(time.time()), "model": model}
    try:
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await _stream_completions(request, job, faults, outputs, head, prompt_tokens, include_usage)
        await consume(request, job, faults)
        outputs = settled(job, outputs)
        choices = [
            {"index": i, "text": o.text, "logprobs": None, "finish_reason": o.finish}
            | {"stop_reason": o.stop_sequence, "prompt_logprobs": None}
            for i, o in enumerate(outputs)
        ]
        total = sum(len(o.pieces) for o in outputs)
        return reply({**head, "choices": choices, "usage": usage(prompt_tokens, total, job.cached_tokens)})
    finally:
        if not job.done:
            job.abort()


async def _stream_completions(
    request: web.Request,
    job: Job,
    faults: Faults,
    outputs: list[textgen.Output],
    head: dict[str, Any],
    prompt_tokens: int,
    include_usage: bool,
) -> web.StreamResponse:
    """One chunk per token; the last of each choice carries its finish_reason, as vLLM's completions do."""
    resp = await start_sse(request)
    sent = 0
    try:
        async for em in paced(job, faults):
            out = outputs[em.choice].cut(em.position) if em.aborted else outputs[em.choice]
            piece = out.pieces[em.position] if em.position < len(out.pieces) else ""
            choice = {"index": em.choice, "text": piece, "logprobs": None, "finish_reason": None}
            if em.last:
                choice.update(finish_reason=out.finish, stop_reason=out.stop_sequence)
            await send(resp, {**head, "choices": [choice]})
            sent += 1
            strike(sent, faults, request, job)
        await end_stream(resp, head, settled(job, outputs), prompt_tokens, job, include_usage)
    except (Dropped, ConnectionError):
        pass
    return resp
