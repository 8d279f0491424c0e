"""/v1/messages and /v1/messages/count_tokens in the Anthropic Messages API shapes, as vLLM serves them.

Stream order (https://docs.anthropic.com/en/docs/build-with-claude/streaming; the same in vLLM 0.32.0):
message_start, content_block_start, content_block_delta… (``text_delta``, or ``input_json_delta`` for a
tool_use block), content_block_stop, message_delta (``stop_reason``, ``usage.output_tokens``),
message_stop; each as ``event: NAME`` then ``data: {json}``.
"""

import json
from typing import Any

from aiohttp import web

from engines.simulator import textgen, tokenizer
from engines.simulator.common import (
    STATE,
    APIError,
    Dropped,
    budget,
    check_model,
    last_user_text,
    new_id,
    paced,
    read_json,
    reply,
    request_faults,
    send,
    start_sse,
    strike,
)
from engines.simulator.faults import Faults
from engines.simulator.scheduler import Job

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def system_text(system: Any) -> str | None:
    """``system`` as a string or a list of text blocks, flattened."""
    return tokenizer.content_text(system) if system else None


def _prompt(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise APIError(400, "messages: must be a non-empty list of message objects.", param="messages")
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


def _stop_reason(out: textgen.Output) -> str:
    return "stop_sequence" if out.stop_sequence else STOP_REASONS[out.finish]


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


async def messages(request: web.Request) -> web.StreamResponse:
    """POST /v1/messages."""
    state = request.app[STATE]
    body = await read_json(request)
    msgs, prompt = _prompt(body)
    if body.get("max_tokens") is None:
        raise APIError(400, "max_tokens: Field required", param="max_tokens")
    model = check_model(state, body.get("model"))
    faults = request_faults(request, last_user_text(msgs))
    ids = tokenizer.encode(prompt)
    max_tokens = budget(state.cfg, len(ids), body.get("max_tokens"), faults.context_length)
    tool = _tool_plan(body, msgs)
    if tool:
        out = textgen.plan_tool_call(tool[0], tool[1], max_tokens=max_tokens, id_prefix="toolu_")
    else:
        stops = [s for s in body.get("stop_sequences") or [] if isinstance(s, str)]
        seed, natural = state.cfg.seed, state.cfg.natural_output_tokens
        out = textgen.plan_text(prompt, seed=seed, index=0, max_tokens=max_tokens, natural=natural, stop=stops)
    job = state.engine.submit([ids], [(len(out.pieces), "length" if out.finish == "length" else "stop")])
    message = {"id": new_id("msg_"), "type": "message", "role": "assistant", "model": model}
    try:
        if body.get("stream"):
            return await _stream(request, job, faults, out, message, len(ids))
        sent = 0
        async for _ in paced(job, faults):
            sent += 1
            strike(sent, faults, request, job)
        done: dict[str, Any] = {
            "content": [_block(out, True)],
            "stop_reason": _stop_reason(out),
            "stop_sequence": out.stop_sequence,
        }
        done["usage"] = {"input_tokens": len(ids), "output_tokens": len(out.pieces)}
        return reply({**message, **done})
    finally:
        if not job.done:
            job.abort()


async def _stream(
    request: web.Request, job: Job, faults: Faults, out: textgen.Output, message: dict[str, Any], prompt_tokens: int
) -> web.StreamResponse:
    resp = await start_sse(request)
    sent = 0
    try:
        async for em in paced(job, faults):
            if em.position == 0:
                start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
                start["usage"] = {"input_tokens": prompt_tokens, "output_tokens": 0}
                await send(resp, {"type": "message_start", "message": start}, "message_start")
                block_start = {"type": "content_block_start", "index": 0, "content_block": _block(out, False)}
                await send(resp, block_start, "content_block_start")
            piece = out.pieces[em.position] if em.position < len(out.pieces) else ""
            if piece:
                delta: dict[str, Any] = {"type": "text_delta", "text": piece}
                if out.tool:
                    delta = {"type": "input_json_delta", "partial_json": piece}
                await send(resp, {"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")
            if em.last:
                await send(resp, {"type": "content_block_stop", "index": 0}, "content_block_stop")
                stop = {"stop_reason": _stop_reason(out), "stop_sequence": out.stop_sequence}
                usage = {"output_tokens": len(out.pieces)}
                await send(resp, {"type": "message_delta", "delta": stop, "usage": usage}, "message_delta")
                await send(resp, {"type": "message_stop"}, "message_stop")
            sent += 1
            strike(sent, faults, request, job)
    except (Dropped, ConnectionError):
        pass
    return resp


async def count_tokens(request: web.Request) -> web.Response:
    """POST /v1/messages/count_tokens: ``{"input_tokens": N}``, counted as /v1/messages counts them."""
    state = request.app[STATE]
    body = await read_json(request)
    check_model(state, body.get("model"))
    _, prompt = _prompt(body)
    return reply({"input_tokens": tokenizer.count(prompt)})
