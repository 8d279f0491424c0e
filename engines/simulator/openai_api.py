"""/v1/chat/completions in vLLM's OpenAI-compatible shapes, streaming and not, and what /v1/completions shares with
it (completions_api.py).

Stream shape (vLLM 0.32.0, vllm/entrypoints/openai/chat_completion/serving.py): per choice a first chunk
whose delta is ``{"role": "assistant", "content": ""}``, then ``reasoning`` deltas (with
``--reasoning-parser``), content (or tool-call) deltas, then a chunk with an empty delta and
``finish_reason``; with ``stream_options.include_usage`` a last chunk with ``choices: []`` and ``usage``
(with ``continuous_usage_stats`` every chunk carries the usage so far); then ``data: [DONE]``. A choice the engine
aborts (a sleep with mode=abort) ends there with ``finish_reason`` "abort" and the stream still ends with ``[DONE]``,
as vLLM 0.32.0's does (engines/simulator/SLEEP.md).
"""

import time
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
    priority_of,
    read_json,
    reply,
    request_faults,
    send,
    settled,
    start_sse,
    strike,
    thought,
    usage,
    validation_error,
)
from engines.simulator.faults import Faults
from engines.simulator.jobs import Job


def choice_count(body: dict[str, Any]) -> int:
    """The choices asked for (``n``; absent or null: 1). Raises APIError 400 in vLLM 0.32's words
    (SamplingParams' _verify_num_sequences) for one below 1, and above 128 (this simulator's own bound)."""
    n = body.get("n")
    if n is None:
        return 1
    if not isinstance(n, int):
        raise validation_error("n", "int_parsing", "Input should be a valid integer", n)
    if n < 1:
        raise APIError(400, f"n must be at least 1, got {n}.")
    if n > 128:
        raise APIError(400, f"n must be between 1 and 128, got {n}.", param="n")
    return int(n)


def _stops(value: str | list[str] | None) -> list[str]:
    """``stop`` as a list; checked before (validation.check_stop)."""
    return [value] if isinstance(value, str) else list(value or [])


def plan_text(state: SimState, body: dict[str, Any], prompt: str, index: int, max_tokens: int) -> textgen.Output:
    """A text answer; the request's ``seed`` shifts the server's, ``stop`` and vLLM's ``ignore_eos`` apply."""
    seed = body.get("seed")
    return textgen.plan_text(
        prompt,
        seed=state.cfg.seed + (seed if isinstance(seed, int) else 0),
        index=index,
        max_tokens=max_tokens,
        natural=state.cfg.natural_output_tokens,
        stop=_stops(body.get("stop")),
        ignore_eos=bool(body.get("ignore_eos")),
    )


def _tool_plan(body: dict[str, Any], messages: list[Any]) -> tuple[str, Any] | None:
    """The (name, parameters schema) of the tool to call, or None for a text answer."""
    tools = [
        (str(t["function"].get("name", "")), t["function"].get("parameters"))
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    choice = body.get("tool_choice", "auto")
    if not tools or choice == "none":
        return None
    forced = choice["function"].get("name") if isinstance(choice, dict) and "function" in choice else None
    required = choice == "required"
    if forced is None and not required and (messages[-1] or {}).get("role") != "user":
        return None  # answering a tool result: talk, don't loop
    index = textgen.pick_tool(tools, last_user_text(messages), forced, required)
    return None if index is None else tools[index]


def submit(state: SimState, prompts: list[list[int]], outputs: list[textgen.Output], body: dict[str, Any]) -> Job:
    reasons = [(o.tokens, "length" if o.finish == "length" else "stop") for o in outputs]
    return state.engine.submit(prompts, reasons, priority_of(body))


def _chat_output(state: SimState, body: dict[str, Any], prompt: str, index: int, max_tokens: int) -> textgen.Output:
    """One choice's answer: agent mode's move, else a tool call when one is due, else text; reasoning first."""
    out = agent_output(state, agent.from_chat(body), max_tokens, "chatcmpl-tool-") if index == 0 else None
    if out is None:
        tool = _tool_plan(body, body["messages"])
        out = (
            textgen.plan_tool_call(tool[0], tool[1], max_tokens=max_tokens, id_prefix="chatcmpl-tool-")
            if tool
            else plan_text(state, body, prompt, index, max_tokens)
        )
    return thought(state, out, prompt, max_tokens)


async def consume(request: web.Request, job: Job, faults: Faults) -> None:
    """Wait for a non-streamed answer, applying the same faults a stream would see."""
    sent = 0
    async for _ in paced(job, faults):
        sent += 1
        strike(sent, faults, request, job)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """POST /v1/chat/completions."""
    state = request.app[STATE]
    body = await read_json(request)
    messages = validation.check_chat(body)
    model = check_model(state, body.get("model"))
    check_sampling(body)
    faults = request_faults(request, last_user_text(messages))
    prompt = tokenizer.render_chat(messages, tools=body.get("tools"))
    ids = tokenizer.encode(prompt)
    requested = body.get("max_completion_tokens")
    requested = body.get("max_tokens") if requested is None else requested  # max_completion_tokens wins
    max_tokens = budget(state.cfg, len(ids), requested, faults.context_length)
    n = choice_count(body)
    outputs = [_chat_output(state, body, prompt, i, max_tokens) for i in range(n)]
    job = submit(state, [ids] * n, outputs, body)
    try:
        if body.get("stream"):
            return await _stream_chat(request, job, faults, outputs, model, len(ids), _stream_usage(body))
        await consume(request, job, faults)
        outputs = settled(job, outputs)
        choices = [_chat_choice(i, o) for i, o in enumerate(outputs)]
        totals = usage(len(ids), _total(outputs), job.cached_tokens, _reasoning(outputs))
        return reply(_chat_response(model, choices, totals))
    finally:
        if not job.done:
            job.abort()


def _chat_choice(index: int, out: textgen.Output) -> dict[str, Any]:
    calls = []
    if out.tool:
        function = {"name": out.tool.name, "arguments": out.text}
        calls = [{"id": out.tool.id, "type": "function", "function": function}]
    message: dict[str, Any] = {"role": "assistant", "content": None if out.tool else out.text, "refusal": None}
    message.update({"annotations": None, "audio": None, "function_call": None, "tool_calls": calls})
    message["reasoning"] = out.reasoning_text or None
    return {
        "index": index,
        "message": message,
        "logprobs": None,
        "finish_reason": out.finish,
        "stop_reason": out.stop_sequence,
    }


def _total(outputs: list[textgen.Output]) -> int:
    return sum(o.tokens for o in outputs)


def _reasoning(outputs: list[textgen.Output]) -> int | None:
    """Reasoning tokens for the usage details: reported only when some were generated (a reasoning parser)."""
    return sum(len(o.reasoning) for o in outputs) or None


def _stream_usage(body: dict[str, Any]) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats) of the request's stream_options."""
    options = body.get("stream_options") or {}
    return bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))


def _chat_response(model: str, choices: list[dict[str, Any]], totals: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": totals,
        "prompt_logprobs": None,
        "kv_transfer_params": None,
    }


async def _stream_chat(
    request: web.Request,
    job: Job,
    faults: Faults,
    outputs: list[textgen.Output],
    model: str,
    prompt_tokens: int,
    usage_options: tuple[bool, bool],
) -> web.StreamResponse:
    head = {"id": new_id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    continuous = usage_options[1]
    generated = [0] * len(outputs)

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish, **extra}
        so_far = usage(prompt_tokens, generated[index], 0) if continuous else None
        return {**head, "choices": [choice], **({"usage": so_far} if so_far else {})}

    resp = await start_sse(request)
    sent = 0
    try:
        async for em in paced(job, faults):
            out = outputs[em.choice]
            if em.position == 0:
                await send(resp, chunk(em.choice, {"role": "assistant", "content": ""}))
            if em.aborted:
                await send(resp, chunk(em.choice, {}, "abort", stop_reason=None))
                continue
            generated[em.choice] = em.position + 1
            for delta in _deltas(out, em.position):
                await send(resp, chunk(em.choice, delta))
            if em.last:
                await send(resp, chunk(em.choice, {}, out.finish, stop_reason=out.stop_sequence))
            sent += 1
            strike(sent, faults, request, job)
        await end_stream(resp, head, settled(job, outputs), prompt_tokens, job, usage_options[0])
    except (Dropped, ConnectionError):
        pass
    return resp


def _deltas(out: textgen.Output, position: int) -> list[dict[str, Any]]:
    """The deltas of output token ``position``: reasoning, content, or a tool call's head then its arguments."""
    kind, piece = out.piece(position)
    if kind == "reasoning":
        return [{"reasoning": piece}]
    deltas: list[dict[str, Any]] = []
    if out.tool and position == len(out.reasoning):
        function = {"name": out.tool.name, "arguments": ""}
        deltas.append({"tool_calls": [{"index": 0, "id": out.tool.id, "type": "function", "function": function}]})
    if piece and out.tool:
        deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    elif piece:
        deltas.append({"content": piece})
    return deltas


async def end_stream(
    resp: web.StreamResponse,
    head: dict[str, Any],
    outputs: list[textgen.Output],
    prompt_tokens: int,
    job: Job,
    include_usage: bool,
) -> None:
    """The usage chunk (``choices: []``) when asked for, then ``[DONE]``: how vLLM ends both OpenAI streams."""
    if include_usage:
        totals = usage(prompt_tokens, _total(outputs), job.cached_tokens, _reasoning(outputs))
        await send(resp, {**head, "choices": [], "usage": totals})
    await send(resp, "[DONE]")
