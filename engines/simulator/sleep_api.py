"""vLLM 0.32.0's development routes for sleep mode, served only when ``VLLM_SERVER_DEV_MODE`` is a non-zero integer
(vllm/entrypoints/launchers/api_server/routers.py); their answers as vLLM's (vllm/entrypoints/serve/dev/sleep/,
dev/rpc/, dev/cache/ api_router.py), checked against a real vLLM 0.32.0 server (engines/simulator/SLEEP.md):

- ``POST /sleep?level=0|1|2&mode=abort|wait|keep`` (defaults 1 and abort): ``{"status": "sleeping", "level": N}``;
  a bad level or mode is vLLM's 400 validation error (type "Bad Request", param ``query.level``/``query.mode``);
- ``POST /wake_up[?tags=weights&tags=kv_cache|scheduling]``: ``{"status": "awake"|"sleeping", "tags": [...]|null}``;
  a failed wake (``--fault-wake-fails``) is a 500 with the engine's reason;
- ``GET /is_sleeping``: ``{"is_sleeping": bool}``;
- ``POST /collective_rpc {"method": "reload_weights"}``: reloads the weights (after a level-2 sleep),
  ``{"results": [null, ...]}`` one per GPU; other methods are not simulated (500);
- ``POST /reset_prefix_cache``: ``{"success": bool}``.

None of them takes the API key: vLLM guards only ``/v1`` (and ``/v2``, ``/inference``, ``/cohere``) paths.
"""

from typing import Any

from aiohttp import web

from engines.simulator.common import STATE, APIError, read_json, reply
from engines.simulator.sleep import MODES, WakeFailed


def _validation_error(errors: list[dict[str, Any]]) -> APIError:
    """vLLM's answer to a request FastAPI could not validate (vllm/entrypoints/serve/exception_handling/handlers/
    validation.py): every error's dict as Python prints it, under a count."""
    label = "error" if len(errors) == 1 else "errors"
    message = f"{len(errors)} validation {label}:\n" + "".join(f"  {e}\n" for e in errors)
    return APIError(400, message.rstrip(), "Bad Request", str(errors[0]["loc"]))


def _bounds(level: int, raw: str) -> list[dict[str, Any]]:
    """The error of a level outside 0–2 (``Query(ge=0, le=2)``), as pydantic words it."""
    where = {"loc": "query.level"}
    if level > 2:
        msg = "Input should be less than or equal to 2"
        return [{"type": "less_than_equal", **where, "msg": msg, "input": raw, "ctx": {"le": 2}}]
    if level < 0:
        msg = "Input should be greater than or equal to 0"
        return [{"type": "greater_than_equal", **where, "msg": msg, "input": raw, "ctx": {"ge": 0}}]
    return []


def _sleep_query(request: web.Request) -> tuple[int, str]:
    """``level`` (an integer 0–2, default 1) and ``mode`` (default "abort"), checked as pydantic checks them."""
    errors: list[dict[str, Any]] = []
    raw = request.query.get("level")
    level = 1
    if raw is not None:
        try:
            level = int(raw.strip())
        except ValueError:
            msg = "Input should be a valid integer, unable to parse string as an integer"
            errors.append({"type": "int_parsing", "loc": "query.level", "msg": msg, "input": raw})
        else:
            errors.extend(_bounds(level, raw))
    mode = request.query.get("mode", "abort")
    if mode not in MODES:
        expected = "'abort', 'wait' or 'keep'"
        error = {"type": "literal_error", "loc": "query.mode", "msg": f"Input should be {expected}", "input": mode}
        errors.append({**error, "ctx": {"expected": expected}})
    if errors:
        raise _validation_error(errors)
    return level, mode


async def sleep(request: web.Request) -> web.Response:
    """POST /sleep: answers once the engine sleeps (after the running requests with mode=wait)."""
    state = request.app[STATE]
    level, mode = _sleep_query(request)
    with state.metrics.operation("sleep"):
        await state.sleep.sleep(level, mode)
    state.metrics.set_sleep_state(True, level)
    return reply({"status": "sleeping", "level": level})


async def wake_up(request: web.Request) -> web.Response:
    """POST /wake_up: answers once the memory named is back (a 500 with vLLM's wording when the wake fails)."""
    state = request.app[STATE]
    tags = request.query.getall("tags", []) or None
    try:
        with state.metrics.operation("wake"):
            awake = await state.sleep.wake_up(tags)
    except WakeFailed as exc:
        raise APIError(500, str(exc), "InternalServerError") from None
    if awake:
        state.metrics.set_sleep_state(False, 0)
    return reply({"status": "awake" if awake else "sleeping", "tags": tags})


async def is_sleeping(request: web.Request) -> web.Response:
    """GET /is_sleeping."""
    return reply({"is_sleeping": request.app[STATE].sleep.sleeping})


async def collective_rpc(request: web.Request) -> web.Response:
    """POST /collective_rpc: ``reload_weights`` only, the call a level-2 wake needs (vLLM's sleep-mode docs)."""
    state = request.app[STATE]
    body = await read_json(request)
    method = body.get("method")
    if method is None:
        raise APIError(400, "Missing 'method' in request body", "Bad Request")
    if method != "reload_weights":
        raise APIError(500, f"Call to collective_rpc method failed: {method!r} is not simulated", "InternalServerError")
    try:
        await state.sleep.reload_weights()
    except RuntimeError as exc:
        raise APIError(500, f"Call to collective_rpc method failed: {exc}", "InternalServerError") from None
    return reply({"results": [None] * state.cfg.gpus})


async def reset_prefix_cache(request: web.Request) -> web.Response:
    """POST /reset_prefix_cache: ``{"success": false}`` while requests hold KV blocks."""
    return reply({"success": request.app[STATE].sleep.forget_prefixes()})


def add_routes(app: web.Application) -> None:
    """The development routes above, which vLLM adds only under ``VLLM_SERVER_DEV_MODE``."""
    app.router.add_post("/sleep", sleep)
    app.router.add_post("/wake_up", wake_up)
    app.router.add_get("/is_sleeping", is_sleeping)
    app.router.add_post("/collective_rpc", collective_rpc)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
