"""/v1/messages and /v1/messages/count_tokens in the Anthropic Messages API shapes, as vLLM serves them.

Stream order (https://docs.anthropic.com/en/docs/build-with-claude/streaming; the same in vLLM 0.32.0,
vllm/entrypoints/anthropic/serving.py): message_start (``usage.input_tokens``: the whole prompt), then with
``--reasoning-parser`` a ``thinking`` block (``thinking_delta``…, one ``signature_delta``), then the answer's
block: content_block_start, content_block_delta… (``text_delta``, or ``input_json_delta`` for a tool_use
block), content_block_stop; message_delta (``stop_reason``, and usage as vLLM's ``_build_anthropic_usage``
gives it: ``input_tokens`` the uncached part of the prompt, ``cache_read_input_tokens`` the cached part,
``output_tokens``), message_stop; each as ``event: NAME`` then ``data: {json}``.
"""

import json
import uuid
from typing import Any

from aiohttp import web

from engines.simulator import agent, textgen, tokenizer, validation
from engines.simulator.common import (
    STATE,
    APIError,
    Dropped,
    SimState,
    agent_output,
    budget,
    check_model,
    check_sampling,
    last_user_text,
    new_id,
    paced,
    read_json,
    reply,
    request_faults,
    send,
    settled,
    start_sse,
    strike,
    thought,
)
from engines.simulator.faults import Faults
from engines.simulator.jobs import Job

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def system_text(system: Any) -> str | None:
    """``system`` as a string or a list of text blocks, flattened."""
    return tokenizer.content_text(system) if system else None


def _prompt(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The request's messages, checked (validation.check_anthropic), and the prompt they render."""
    messages = validation.check_anthropic(body)
    return messages, tokenizer.render_chat(messages, tools=body.get("tools"), system=system_text(body.get("system")))


def _has_tool_result(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def _tool_plan(body: dict[str, Any], messages: list[dict[str, Any]]) -> tuple[str, Any] | None:
    """The (name, input_schema) of the tool to call, or None for a text answer."""
    tools = [(str(t.get("name", "")), t.get("input_schema")) for t in body.get("tools") or [] if isinstance(t, dict)]
    choice = body.get("tool_choice") or {"type": "auto"}
    kind = choice.get("type", "auto") if isinstance(choice, dict) else "auto"
    if not tools or kind == "none":
        return None
    forced = choice.get("name") if kind == "tool" else None
    required = kind == "any"
    if forced is None and not required and (messages[-1].get("role") != "user" or _has_tool_result(messages[-1])):
        return None  # answering a tool result: talk, don't loop
    index = textgen.pick_tool(tools, last_user_text(messages), forced, required)
    return None if index is None else tools[index]


def _stop_reason(out: textgen.Output) -> str | None:
    """Anthropic's stop_reason; None for an answer the engine aborted, as vLLM maps finish_reason "abort"."""
    return "stop_sequence" if out.stop_sequence else STOP_REASONS.get(out.finish)


def _block(out: textgen.Output, complete: bool) -> dict[str, Any]:
    if out.tool is None:
        return {"type": "text", "text": out.text if complete else ""}
    tool_input: Any = {}
    if complete:
        try:
            tool_input = json.loads(out.text)
        except ValueError:
            tool_input = {}  # arguments cut by max_tokens
    return {"type": "tool_use", "id": out.tool.id, "name": out.tool.name, "input": tool_input}


def _answer(
    state: SimState, body: dict[str, Any], msgs: list[dict[str, Any]], prompt: str, max_tokens: int
) -> textgen.Output:
    """Agent mode's move, else a tool call when one is due, else text."""
    out = agent_output(state, agent.from_anthropic(body), max_tokens, "toolu_")
    if out is not None:
        return out
    tool = _tool_plan(body, msgs)
    if tool:
        return textgen.plan_tool_call(tool[0], tool[1], max_tokens=max_tokens, id_prefix="toolu_")
    stops = [s for s in body.get("stop_sequences") or [] if isinstance(s, str)]
    seed, natural = state.cfg.seed, state.cfg.natural_output_tokens
    return textgen.plan_text(prompt, seed=seed, index=0, max_tokens=max_tokens, natural=natural, stop=stops)


def final_usage(prompt_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, int]:
    """vLLM 0.32's ``_build_anthropic_usage``: input_tokens is the prompt less its cached part."""
    return {
        "input_tokens": prompt_tokens - cached_tokens,
        "cache_read_input_tokens": cached_tokens,
        "output_tokens": output_tokens,
    }


def _thinking(out: textgen.Output, complete: bool) -> dict[str, Any]:
    block = {"type": "thinking", "thinking": out.reasoning_text if complete else ""}
    return {**block, "signature": uuid.uuid4().hex} if complete else block


async def messages(request: web.Request) -> web.StreamResponse:
    """POST /v1/messages."""
    state = request.app[STATE]
    body = await read_json(request)
    msgs, prompt = _prompt(body)
    if body.get("max_tokens") is None:
        raise APIError(400, "max_tokens: Field required", param="max_tokens")
    model = check_model(state, body.get("model"))
    check_sampling(body)
    faults = request_faults(request, last_user_text(msgs))
    ids = tokenizer.encode(prompt)
    max_tokens = budget(state.cfg, len(ids), body.get("max_tokens"), faults.context_length)
    out = thought(state, _answer(state, body, msgs, prompt, max_tokens), prompt, max_tokens)
    job = state.engine.submit([ids], [(out.tokens, "length" if out.finish == "length" else "stop")])
    message = {"id": new_id("msg_"), "type": "message", "role": "assistant", "model": model}
    try:
        if body.get("stream"):
            return await _stream(request, job, faults, out, message, len(ids))
        sent = 0
        async for _ in paced(job, faults):
            sent += 1
            strike(sent, faults, request, job)
        out = settled(job, [out])[0]
        thinking = [_thinking(out, True)] if out.reasoning else []
        done: dict[str, Any] = {
            "content": [*thinking, _block(out, True)],
            "stop_reason": _stop_reason(out),
            "stop_sequence": out.stop_sequence,
        }
        done["usage"] = final_usage(len(ids), job.cached_tokens, out.tokens)
        return reply({**message, **done})
    finally:
        if not job.done:
            job.abort()


async def _stream(
    request: web.Request, job: Job, faults: Faults, out: textgen.Output, message: dict[str, Any], prompt_tokens: int
) -> web.StreamResponse:
    resp = await start_sse(request)
    sent = 0
    answer_at = 1 if out.reasoning else 0  # the answer block's index
    try:
        async for em in paced(job, faults):
            if em.position == 0:
                start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
                start["usage"] = {"input_tokens": prompt_tokens, "output_tokens": 0}
                await send(resp, {"type": "message_start", "message": start}, "message_start")
                if out.reasoning:
                    await _event(resp, "content_block_start", index=0, content_block=_thinking(out, False))
            if em.aborted:
                await _aborted(
                    resp, out, em.position, answer_at, final_usage(prompt_tokens, job.cached_tokens, em.position)
                )
                continue
            kind, piece = out.piece(em.position)
            if kind == "answer" and em.position == len(out.reasoning):
                if out.reasoning:
                    await _close_thinking(resp)
                await _event(resp, "content_block_start", index=answer_at, content_block=_block(out, False))
            if piece:
                await _event(
                    resp,
                    "content_block_delta",
                    index=answer_at if kind == "answer" else 0,
                    delta=_delta(out, kind, piece),
                )
            if em.last:
                if kind == "reasoning":  # cut before its answer began
                    await _close_thinking(resp)
                else:
                    await _event(resp, "content_block_stop", index=answer_at)
                stop = {"stop_reason": _stop_reason(out), "stop_sequence": out.stop_sequence}
                usage = final_usage(prompt_tokens, job.cached_tokens, out.tokens)
                await _event(resp, "message_delta", delta=stop, usage=usage)
                await _event(resp, "message_stop")
            sent += 1
            strike(sent, faults, request, job)
    except (Dropped, ConnectionError):
        pass
    return resp


async def _aborted(
    resp: web.StreamResponse, out: textgen.Output, tokens: int, answer_at: int, usage: dict[str, Any]
) -> None:
    """The engine aborted the answer after ``tokens`` tokens (a sleep with mode=abort): close the open block, then
    message_delta with stop_reason null (vLLM's mapping of finish_reason "abort") and message_stop."""
    if tokens > len(out.reasoning):
        await _event(resp, "content_block_stop", index=answer_at)
    elif out.reasoning:
        await _close_thinking(resp)
    await _event(resp, "message_delta", delta={"stop_reason": None, "stop_sequence": None}, usage=usage)
    await _event(resp, "message_stop")


async def _event(resp: web.StreamResponse, kind: str, **fields: Any) -> None:
    await send(resp, {"type": kind, **fields}, kind)


async def _close_thinking(resp: web.StreamResponse) -> None:
    await _event(resp, "content_block_delta", index=0, delta={"type": "signature_delta", "signature": uuid.uuid4().hex})
    await _event(resp, "content_block_stop", index=0)


def _delta(out: textgen.Output, kind: str, piece: str) -> dict[str, Any]:
    if kind == "reasoning":
        return {"type": "thinking_delta", "thinking": piece}
    if out.tool:
        return {"type": "input_json_delta", "partial_json": piece}
    return {"type": "text_delta", "text": piece}


async def count_tokens(request: web.Request) -> web.Response:
    """POST /v1/messages/count_tokens: ``{"input_tokens": N}``, counted as /v1/messages counts them."""
    state = request.app[STATE]
    body = await read_json(request)
    check_model(state, body.get("model"))
    _, prompt = _prompt(body)
    return reply({"input_tokens": tokenizer.count(prompt)})
