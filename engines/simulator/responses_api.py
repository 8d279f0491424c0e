"""/v1/responses in OpenAI's Responses API shapes, as vLLM 0.32.0 serves it (streamed and not; no store).

Read in vLLM 0.32.0's vllm/entrypoints/openai/responses/: ``utils.py`` (input items → chat messages:
instructions as the system message, ``message`` items by role, ``function_call`` items as the assistant's
tool calls, ``function_call_output`` items as tool messages; tools flattened: ``namespace`` functions as
``<namespace>__<name>``, ``custom`` tools as a function taking one string ``input``), ``serving.py`` and
``streaming_events.py`` (the simple, non-harmony stream):

``response.created`` and ``response.in_progress`` at once (status in_progress); then per output item, a new
one when reasoning, text or a tool call begins: ``response.output_item.added`` (a ``reasoning``,
``message`` or ``function_call`` item), for reasoning and text ``response.content_part.added``, the deltas
(``response.reasoning_text.delta``, ``response.output_text.delta``,
``response.function_call_arguments.delta``), their ``.done`` events, ``response.content_part.done`` and
``response.output_item.done``; last ``response.completed`` with the whole response, whose status is
``incomplete`` (``incomplete_details.reason: max_output_tokens``) when the limit cut it, ``cancelled`` when the
engine aborted it (a sleep with mode=abort), as vLLM reports them. Every event has a ``sequence_number`` from 0
and goes as ``event: TYPE`` / ``data: {json}`` (responses_events.py). Item ids: ``rs_``, ``msg_``, ``fc_``
(``ctc_`` for a custom tool's call) + hex; call ids ``chatcmpl-tool-`` + hex.
"""

import json
import time
from typing import Any

from aiohttp import web

from engines.simulator import agent, agent_tools, textgen, tokenizer, validation
from engines.simulator.common import (
    STATE,
    APIError,
    Dropped,
    SimState,
    agent_output,
    budget,
    check_model,
    check_sampling,
    new_id,
    paced,
    priority_of,
    read_json,
    reply,
    request_faults,
    settled,
    start_sse,
    strike,
    thought,
)
from engines.simulator.faults import Faults
from engines.simulator.jobs import Job
from engines.simulator.responses_events import Events, close_item, delta, open_item

NAMESPACE_SEPARATOR = "__"
type Tools = list[tuple[str, Any, str | None, bool]]  # (flat name, parameters, namespace, custom?)
CUSTOM_INPUT = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}


def _items(body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("input")
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw or not all(isinstance(i, dict) for i in raw):
        raise APIError(400, "input must be a string or a non-empty list of input items.", param="input")
    for index, item in enumerate(raw):
        if item.get("type", "message") == "message":
            validation.check_content(item.get("content"), f"input.{index}.content", nullable=True)
    return raw


def _messages(instructions: Any, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages the prompt is rendered from (vLLM's construct_input_messages)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": item.get("role", "user"), "content": item.get("content")})
        elif kind in ("function_call", "custom_tool_call"):
            arguments = item.get("arguments") if kind == "function_call" else json.dumps({"input": item.get("input")})
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": arguments},
            }
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": item.get("output")})
        elif kind == "reasoning":
            continue
        else:
            raise APIError(400, f"Unsupported input item type: {kind}", param="input")
    return out


def offered(body: dict[str, Any]) -> Tools:
    """(flat name, parameters schema, namespace, custom?) per tool the model is shown; built-ins left out."""
    tools: Tools = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict) or not tool.get("name"):
            continue
        if tool.get("type") == "function":
            tools.append((str(tool["name"]), tool.get("parameters"), None, False))
        elif tool.get("type") == "custom":
            tools.append((str(tool["name"]), CUSTOM_INPUT, None, True))
        elif tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and inner.get("type") == "function" and inner.get("name"):
                    flat = f"{tool['name']}{NAMESPACE_SEPARATOR}{inner['name']}"
                    tools.append((flat, inner.get("parameters"), str(tool["name"]), False))
    return tools


def agent_tools_of(tools: Tools) -> list[agent_tools.Tool]:
    """The tools as agent mode reads them: flat names, a custom tool as a function of one string ``input``."""
    return [agent_tools.Tool(t[0], t[1] if isinstance(t[1], dict) else {}) for t in tools]


def _plan(
    state: SimState, body: dict[str, Any], items: list[dict[str, Any]], prompt: str, max_tokens: int, tools: Tools
) -> textgen.Output:
    """Agent mode's move, else a tool call when one is due (a tool named in the last user message, or one
    demanded by tool_choice), else text; reasoning first with a reasoning parser."""
    conversation = agent.from_responses(items, str(body.get("instructions") or ""), agent_tools_of(tools))
    out = agent_output(state, conversation, max_tokens, "chatcmpl-tool-")
    if out is None:
        out = _tool_or_text(state, body, items, prompt, max_tokens, tools)
    return thought(state, out, prompt, max_tokens)


def _tool_or_text(
    state: SimState, body: dict[str, Any], items: list[dict[str, Any]], prompt: str, max_tokens: int, tools: Tools
) -> textgen.Output:
    choice = body.get("tool_choice", "auto")
    last = items[-1]
    named = choice.get("name") if isinstance(choice, dict) else None
    due = tools and choice != "none" and (named or choice == "required" or last.get("role") == "user")
    if due:
        text = agent.text_of(last.get("content")) if last.get("role") == "user" else ""
        index = textgen.pick_tool([(t[0], t[1]) for t in tools], text, named, choice == "required")
        if index is not None:
            name, schema = tools[index][0], tools[index][1]
            return textgen.plan_tool_call(name, schema, max_tokens=max_tokens, id_prefix="chatcmpl-tool-")
    seed, natural = state.cfg.seed, state.cfg.natural_output_tokens
    return textgen.plan_text(prompt, seed=seed, index=0, max_tokens=max_tokens, natural=natural)


async def responses(request: web.Request) -> web.StreamResponse:
    """POST /v1/responses."""
    state = request.app[STATE]
    body = await read_json(request)
    model = check_model(state, body.get("model"))
    check_sampling(body)
    if body.get("previous_response_id"):
        raise APIError(404, f"Response with id '{body['previous_response_id']}' not found.", "NotFoundError")
    items = _items(body)
    tools = offered(body)
    messages = _messages(body.get("instructions"), items)
    faults = request_faults(
        request, agent.text_of(next((i.get("content") for i in reversed(items) if i.get("role") == "user"), ""))
    )
    shown = [{"type": "function", "function": {"name": t[0], "parameters": t[1]}} for t in tools]
    prompt = tokenizer.render_chat(messages, tools=shown or None)
    ids = tokenizer.encode(prompt)
    max_tokens = budget(state.cfg, len(ids), body.get("max_output_tokens"), faults.context_length)
    out = _plan(state, body, items, prompt, max_tokens, tools)
    job = state.engine.submit([ids], [(out.tokens, "length" if out.finish == "length" else "stop")], priority_of(body))
    base = _response(body, model, max_tokens)
    try:
        if body.get("stream"):
            return await _stream(request, job, faults, out, base, len(ids), tools)
        async for em in paced(job, faults):
            strike(em.position + 1, faults, request, job)
        out = settled(job, [out])[0]
        final = _final(base, out, _output(out, tools), len(ids), job.cached_tokens)
        return reply(final)
    finally:
        if not job.done:
            job.abort()


def _response(body: dict[str, Any], model: str, max_tokens: int) -> dict[str, Any]:
    """The response object's fields that echo the request (vLLM's ResponsesResponse.from_request)."""
    return {
        "id": new_id("resp_"),
        "created_at": int(time.time()),
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata"),
        "model": model,
        "object": "response",
        "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": body.get("temperature", 1.0),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "background": False,
        "max_output_tokens": max_tokens,
        "max_tool_calls": body.get("max_tool_calls"),
        "previous_response_id": None,
        "prompt": None,
        "reasoning": body.get("reasoning"),
        "service_tier": "auto",
        "status": "in_progress",
        "text": body.get("text"),
        "top_logprobs": None,
        "truncation": body.get("truncation", "disabled"),
        "usage": None,
        "user": body.get("user"),
    }


def _call_item(out: textgen.Output, tools: Tools, item_id: str) -> dict[str, Any]:
    assert out.tool is not None
    spec = next((t for t in tools if t[0] == out.tool.name), (out.tool.name, None, None, False))
    if spec[3]:
        try:
            payload = json.loads(out.text).get("input", out.text)
        except (ValueError, AttributeError):
            payload = out.text  # cut by max_output_tokens
        return {
            "type": "custom_tool_call",
            "id": "ctc" + item_id[2:],
            "call_id": out.tool.id,
            "name": out.tool.name,
            "input": payload,
        }
    name = out.tool.name.split(NAMESPACE_SEPARATOR, 1)[1] if spec[2] else out.tool.name
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": out.tool.id,
        "name": name,
        "namespace": spec[2],
        "arguments": out.text,
        "status": "completed",
    }


def _output(out: textgen.Output, tools: Tools) -> list[dict[str, Any]]:
    """The whole answer's output items: reasoning, then the message or the tool call."""
    items: list[dict[str, Any]] = []
    if out.reasoning:
        items.append(
            {
                "id": new_id("rs_"),
                "summary": [],
                "type": "reasoning",
                "status": None,
                "content": [{"text": out.reasoning_text, "type": "reasoning_text"}],
                "encrypted_content": None,
            }
        )
    if out.tool:
        items.append(_call_item(out, tools, new_id("fc_")))
    elif out.pieces:
        part: dict[str, Any] = {"type": "output_text", "text": out.text, "annotations": [], "logprobs": None}
        items.append(
            {"id": new_id("msg_"), "type": "message", "role": "assistant", "status": "completed", "content": [part]}
        )
    return items


def _final(
    base: dict[str, Any], out: textgen.Output, items: list[dict[str, Any]], prompt_tokens: int, cached: int
) -> dict[str, Any]:
    incomplete = out.finish == "length"
    status = "incomplete" if incomplete else "cancelled" if out.finish == "abort" else "completed"
    usage = {
        "input_tokens": prompt_tokens,
        "output_tokens": out.tokens,
        "total_tokens": prompt_tokens + out.tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens_details": {"reasoning_tokens": len(out.reasoning), "tool_output_tokens": 0},
    }
    return {
        **base,
        "output": items,
        "status": status,
        "usage": usage,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
    }


async def _stream(
    request: web.Request,
    job: Job,
    faults: Faults,
    out: textgen.Output,
    base: dict[str, Any],
    prompt_tokens: int,
    tools: Tools,
) -> web.StreamResponse:
    resp = await start_sse(request)
    emit = Events(resp)
    await emit("response.created", response=base)
    await emit("response.in_progress", response=base)
    items = _output(out, tools)
    answer_index = 1 if out.reasoning else 0
    try:
        async for em in paced(job, faults):
            if em.aborted:
                await _cancel(emit, out, em.position, items, (base, prompt_tokens, job.cached_tokens, tools))
                continue
            kind, piece = out.piece(em.position)
            at = 0 if kind == "reasoning" else answer_index
            if em.position == 0 or (kind == "answer" and em.position == len(out.reasoning)):
                if kind == "answer" and out.reasoning:
                    await close_item(emit, items[0], 0)
                if at < len(items):
                    await open_item(emit, items[at], at)
            if piece:
                await delta(emit, items[at], at, piece)
            if em.last:
                if at < len(items):
                    await close_item(emit, items[at], at)
                final = _final(base, out, items, prompt_tokens, job.cached_tokens)
                await emit("response.completed", response=final)
            strike(em.position + 1, faults, request, job)
    except (Dropped, ConnectionError):
        pass
    return resp


async def _cancel(
    emit: Events,
    out: textgen.Output,
    tokens: int,
    items: list[dict[str, Any]],
    context: tuple[dict[str, Any], int, int, Tools],
) -> None:
    """The engine aborted the answer after ``tokens`` tokens (a sleep with mode=abort): close the item being
    written, then ``response.completed`` with status "cancelled", as vLLM reports finish_reason "abort"."""
    base, prompt_tokens, cached, tools = context
    cut = out.cut(tokens)
    done = [{**new, "id": old["id"]} for new, old in zip(_output(cut, tools), items, strict=False)]
    if tokens:
        index = 0 if out.piece(tokens - 1)[0] == "reasoning" else len(done) - 1
        await close_item(emit, done[index], index)
    await emit("response.completed", response=_final(base, cut, done, prompt_tokens, cached))
