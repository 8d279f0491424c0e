"""What both API dialects share: server state, errors, request checks, SSE writing and stream faults."""

import asyncio
import json
import logging
import math
import os
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from engines.simulator import agent, textgen
from engines.simulator.config import SimConfig
from engines.simulator.faults import FaultError, Faults, parse_faults
from engines.simulator.jobs import Emission, Job
from engines.simulator.metrics import SimMetrics
from engines.simulator.scheduler import Engine
from engines.simulator.sleep import Sleeper
from engines.simulator.tokenizer import content_text

log = logging.getLogger("engines.simulator")


@dataclass
class SimState:
    """Everything the handlers share; ``loaded`` turns true after ``--load-seconds``."""

    cfg: SimConfig
    engine: Engine
    metrics: SimMetrics
    sleep: Sleeper
    created: int = field(default_factory=lambda: int(time.time()))
    loaded: bool = False


STATE = web.AppKey("sim_state", SimState)


class APIError(Exception):
    """A request the simulator refuses; rendered once, in the dialect of the route, by the server's middleware.

    ``status`` is the HTTP status; ``kind`` the OpenAI error type (vLLM's exception class names).
    """

    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param


class Dropped(Exception):
    """The drop-mid-stream fault closed this connection; the handler has nothing more to send."""


ANTHROPIC_KINDS = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}


def openai_error_body(err: APIError) -> dict[str, Any]:
    """vLLM's ErrorResponse: ``{"error": {"message", "type", "param", "code"}}`` (code = HTTP status)."""
    return {"error": {"message": err.message, "type": err.kind, "param": err.param, "code": err.status}}


def anthropic_error_body(err: APIError) -> dict[str, Any]:
    """The Anthropic error shape vLLM's /v1/messages uses: ``{"type": "error", "error": {"type", "message"}}``."""
    kind = ANTHROPIC_KINDS.get(err.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}


FAULT_HEADER = "x-sim-fault"


def request_faults(request: web.Request, text: str) -> Faults:
    """Faults from the header and markers; raises APIError 400 for a malformed one, 500 for error-500."""
    try:
        faults = parse_faults(request.headers.get(FAULT_HEADER), text)
    except FaultError as exc:
        raise APIError(400, str(exc), param=FAULT_HEADER) from None
    if faults.error_500:
        raise APIError(500, "Simulated internal server error (sim fault error-500).", "InternalServerError")
    return faults


def new_id(prefix: str) -> str:
    """A response id such as ``chatcmpl-<32 hex>``."""
    return prefix + uuid.uuid4().hex


# a JSON escape of a UTF-16 surrogate (\\ud800-\\udfff): JSON allows one alone, Unicode text does not
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


async def read_json(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object; raises APIError 400 otherwise, and for a string (or key) that holds a
    lone surrogate (``"\\ud800"``: no text, so nothing can tokenize or write it), naming where it is."""
    try:
        text = await request.text()
        body = json.loads(text)
    except ValueError as exc:
        raise APIError(400, f"Invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise APIError(400, "The request body must be a JSON object.")
    where = _surrogate_at(body) if SURROGATE_ESCAPE.search(text) else None
    if where is not None:
        message = f"{where}: the string holds a lone surrogate (an unpaired \\ud800-\\udfff escape), not valid Unicode."
        raise APIError(400, message, param=where)
    return body


def _surrogate_at(value: Any, where: str = "") -> str | None:
    """The dotted path (``messages.0.content``) of the first string or key in the JSON ``value`` that holds a lone
    surrogate, or None when there is none."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        name = str(key)
        if not _is_text(name):  # a key holding one: named escaped, as the path is sent back
            escaped = name.encode(errors="backslashreplace").decode()
            return f"{where}.{escaped}" if where else escaped
        path = f"{where}.{name}" if where else name
        found = path if isinstance(item, str) and not _is_text(item) else _surrogate_at(item, path)
        if found is not None:
            return found
    return None


def _is_text(value: str) -> bool:
    """Whether ``value`` is Unicode text (it encodes as UTF-8: no lone surrogate)."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_model(state: SimState, requested: Any) -> str:
    """The model name to answer with; raises APIError 404 for a name this server does not serve."""
    if requested in (None, ""):
        return state.cfg.served_model_name
    if requested not in state.cfg.served_model_names:
        raise APIError(404, f"The model `{requested}` does not exist.", "NotFoundError", "model")
    return str(requested)


def last_user_text(messages: list[Any]) -> str:
    """Text of the last user message (for tool picking and ``[[sim:...]]`` markers)."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


# vLLM 0.32's SamplingParams._verify_args (vllm/sampling_params.py): each field's range as its words write it, (low
# excluded, [low included, and whether its refusal names the field (param, and the message's "(parameter=…)" suffix);
# an absent or null field takes vLLM's default, which is in range (tests/data/vllm-0.32.0-cpu-validation-errors.json)
SAMPLING_RANGES = {
    "temperature": (0.0, 2.0, "[0, 2]", True),
    "top_p": (0.0, 1.0, "(0, 1]", True),
    "presence_penalty": (-2.0, 2.0, "[-2, 2]", False),
    "frequency_penalty": (-2.0, 2.0, "[-2, 2]", False),
}
NOT_A_NUMBER = "Input should be a valid number, unable to parse string as a number"


def validation_error(name: str, kind: str, msg: str, value: Any) -> APIError:
    """vLLM's 400 for a field its request model refused (pydantic, in lax mode): ``1 validation error:`` and the
    error as a Python dict on its own line, param ``body.<name>``."""
    error = {"type": kind, "loc": f"body.{name}", "msg": msg, "input": value}
    return APIError(400, f"1 validation error:\n  {error!r}", "Bad Request", f"body.{name}")


def check_sampling(body: dict[str, Any]) -> None:
    """Raises APIError 400, in vLLM's words, for a sampling field out of its range (SAMPLING_RANGES: "top_p must be
    in (0, 1], got 1.5. (parameter=top_p, value=1.5)"; below 0, "temperature must be non-negative, got -1.0.") or
    not a number (pydantic's dump; a boolean is a number to it, as True is 1.0)."""
    for name, (low, high, words, named) in SAMPLING_RANGES.items():
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int | float):
            raise validation_error(
                name, "float_parsing" if isinstance(value, str) else "float_type", NOT_A_NUMBER, value
            )
        number = float(value)
        if name == "temperature" and not math.isfinite(number):
            message = f"temperature must be a finite number, got {number}."
        elif name == "temperature" and number < 0:
            message = f"temperature must be non-negative, got {number}."
        elif not (number > low if words.startswith("(") else number >= low) or number > high:
            message = f"{name} must be in {words}, got {number}."
        else:
            continue
        raise APIError(
            400, f"{message} (parameter={name}, value={number})" if named else message, param=name if named else None
        )


def budget(cfg: SimConfig, prompt_tokens: int, requested: Any, forced: bool) -> int:
    """The completion budget in tokens: ``requested``, or what the context leaves (vLLM's default).

    Raises APIError 400 with vLLM's context-length message when prompt + completion does not fit, or
    when the context-length fault is ``forced``.
    """
    limit = cfg.max_model_len
    if requested is not None and (not isinstance(requested, int) or isinstance(requested, bool) or requested < 1):
        raise APIError(400, f"max_tokens must be at least 1, got {requested}.", param="max_tokens")
    if requested is None and (forced or prompt_tokens >= limit):
        raise APIError(
            400,
            f"This model's maximum context length is {limit} tokens. However, your request has "
            f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
        )
    if requested is None:
        return limit - prompt_tokens
    if forced or prompt_tokens + requested > limit:
        raise APIError(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_tokens + requested} tokens ({prompt_tokens} in the messages, {requested} in the completion). "
            "Please reduce the length of the messages or completion.",
        )
    return int(requested)


def dumps(payload: Any) -> str:
    """Compact JSON, as pydantic's ``model_dump_json`` writes it."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def reply(payload: Any, status: int = 200) -> web.Response:
    """A JSON response with compact JSON, as vLLM (FastAPI + pydantic) sends."""
    return web.json_response(payload, status=status, dumps=dumps)


async def start_sse(request: web.Request) -> web.StreamResponse:
    """Send the headers of a server-sent-events response."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    return resp


async def send(resp: web.StreamResponse, payload: Any, event: str | None = None) -> None:
    """Write one SSE event: ``data: <json>`` (OpenAI) or ``event: NAME`` + ``data:`` (Anthropic)."""
    data = payload if isinstance(payload, str) else dumps(payload)
    head = f"event: {event}\n" if event else ""
    await resp.write(f"{head}data: {data}\n\n".encode())


async def paced(job: Job, faults: Faults) -> AsyncIterator[Emission]:
    """``job``'s tokens with the stall faults applied: silence before the first and between the others."""
    first = True
    async for emission in job.emissions():
        delay = faults.stall_first if first else faults.stall_between
        if delay:
            await asyncio.sleep(delay)
        first = False
        yield emission


def settled(job: Job, outputs: list[textgen.Output]) -> list[textgen.Output]:
    """The answers as the engine finished them: a choice it aborted (a sleep with mode=abort) keeps the tokens it
    had then and finishes "abort", as vLLM reports it."""
    return [out.cut(job.cut[index]) if index in job.cut else out for index, out in enumerate(outputs)]


def strike(sent: int, faults: Faults, request: web.Request, job: Job) -> None:
    """After ``sent`` tokens, apply die-mid-stream (exit the process) or drop-mid-stream (raise Dropped)."""
    if faults.die_after is not None and sent >= faults.die_after:
        log.error("EngineCore encountered a fatal error (simulated fault die-mid-stream); exiting")
        os._exit(1)
    if faults.drop_after is not None and sent >= faults.drop_after:
        log.warning("closing a connection mid-stream (simulated fault drop-mid-stream)")
        job.abort()
        if request.transport is not None:
            request.transport.close()
        raise Dropped


def agent_output(
    state: SimState, conversation: agent.Conversation, max_tokens: int, id_prefix: str
) -> textgen.Output | None:
    """Agent mode's next move as a planned answer (a tool call or its last word), or None when agent mode
    is off, the task holds no steps, or no tool is offered and aider's format is not asked for
    (engines/simulator/agent.py)."""
    if not state.cfg.agent_mode:
        return None
    action = agent.next_action(conversation)
    if action is None:
        return None
    if action.tool is not None:
        return textgen.plan_call(action.tool, action.arguments or {}, max_tokens=max_tokens, id_prefix=id_prefix)
    return textgen.plan_said(action.text, max_tokens=max_tokens)


def thought(state: SimState, out: textgen.Output, prompt: str, max_tokens: int) -> textgen.Output:
    """``out`` with the reasoning a model served with ``--reasoning-parser`` generates first."""
    if not state.cfg.reasoning_parser or not state.cfg.reasoning_tokens:
        return out
    cfg = state.cfg
    return textgen.with_reasoning(out, prompt, seed=cfg.seed, tokens=cfg.reasoning_tokens, max_tokens=max_tokens)


def usage(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int, reasoning_tokens: int | None = None
) -> dict[str, Any]:
    """OpenAI usage, tokens; ``completion_tokens_details.reasoning_tokens`` with a reasoning parser on, as vLLM
    reports it (vllm/entrypoints/openai/chat_completion/serving.py)."""
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
    if reasoning_tokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return out


def priority_of(body: dict[str, Any]) -> int:
    """The request's ``priority`` (vLLM's extension to OpenAI's requests: an integer, lower runs first under the
    priority policy); 0 when absent or not an integer."""
    value = body.get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
