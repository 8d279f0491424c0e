"""The aiohttp application: routes, middlewares (errors, loading, API key) and the engine's lifetime."""

import asyncio
import base64
import hashlib
import hmac
import logging
import math
import os
import random
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from engines.simulator import (
    anthropic_api,
    completions_api,
    openai_api,
    responses_api,
    sleep_api,
    tokenizer,
    validation,
)
from engines.simulator.common import (
    STATE,
    APIError,
    Dropped,
    SimState,
    anthropic_error_body,
    check_model,
    new_id,
    openai_error_body,
    read_json,
    reply,
)
from engines.simulator.config import SimConfig
from engines.simulator.metrics import SimMetrics
from engines.simulator.scheduler import Engine
from engines.simulator.sleep import Sleeper

log = logging.getLogger("engines.simulator")
VERSION = "0.32.0+sim"
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # what vLLM 0.32.0 serves
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _dialect_error(request: web.Request, err: APIError) -> web.Response:
    anthropic = request.path.startswith("/v1/messages")
    body = anthropic_error_body(err) if anthropic else openai_error_body(err)
    return reply(body, status=err.status)


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Render APIError in the route's dialect; unknown routes as FastAPI does; crashes as a 500."""
    try:
        return await handler(request)
    except APIError as err:
        return _dialect_error(request, err)
    except Dropped:
        return web.Response(status=499)  # never reaches the client: its connection is already closed
    except web.HTTPException as exc:
        if exc.status >= 400:
            return reply({"detail": exc.reason}, status=exc.status)
        raise
    except Exception as exc:
        log.exception("unexpected error in %s", request.path)
        return _dialect_error(request, APIError(500, f"Internal server error: {exc}", "InternalServerError"))


@web.middleware
async def loading(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer 503 to everything until ``--load-seconds`` have passed."""
    if not request.app[STATE].loaded:
        raise APIError(503, "The model is still loading.", "ServiceUnavailableError")
    return await handler(request)


@web.middleware
async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    """With ``--api-key``, /v1/* demands ``Authorization: Bearer KEY`` (or ``x-api-key`` on /v1/messages).

    The 401 body is vLLM's: ``{"error": "Unauthorized"}``.
    """
    key = request.app[STATE].cfg.api_key
    if key is None or request.method == "OPTIONS" or not request.path.startswith("/v1"):
        return await handler(request)
    offered = request.headers.get("Authorization", "")
    candidates = [offered.removeprefix("Bearer ")] if offered.startswith("Bearer ") else []
    if request.path.startswith("/v1/messages"):
        candidates.append(request.headers.get("x-api-key", ""))
    if any(hmac.compare_digest(c.encode(), key.encode()) for c in candidates):
        return await handler(request)
    return reply({"error": "Unauthorized"}, status=401)


async def health(request: web.Request) -> web.Response:
    """GET /health: 200 with an empty body once loaded (503 before, from the loading middleware)."""
    return web.Response(status=200)


async def version(request: web.Request) -> web.Response:
    return reply({"version": VERSION})


def _permission(created: int) -> dict[str, Any]:
    """vLLM's ModelPermission, constant but for its id."""
    return {
        "id": new_id("modelperm-"),
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }


async def models(request: web.Request) -> web.Response:
    """GET /v1/models: one entry per served name, in vLLM's ModelCard shape."""
    state = request.app[STATE]
    cards: list[dict[str, Any]] = [
        {
            "id": name,
            "object": "model",
            "created": state.created,
            "owned_by": "vllm",
            "root": state.cfg.model,
            "parent": None,
            "max_model_len": state.cfg.max_model_len,
            "permission": [_permission(state.created)],
        }
        for name in state.cfg.served_model_names
    ]
    return reply({"object": "list", "data": cards})


async def tokenize(request: web.Request) -> web.Response:
    """POST /tokenize with ``prompt`` or ``messages``: ``{"count", "max_model_len", "tokens", "token_strs"}``."""
    state = request.app[STATE]
    body = await read_json(request)
    if isinstance(body.get("messages"), list):
        validation.check_tools(body.get("tools"))
        text = tokenizer.render_chat(validation.check_messages(body["messages"]), tools=body.get("tools"))
    elif isinstance(body.get("prompt"), str):
        text = body["prompt"]
    else:
        raise APIError(400, "Either prompt or messages is required.", param="prompt")
    ids = tokenizer.encode(text)
    strs = tokenizer.pieces(text) if body.get("return_token_strs") else None
    return reply({"count": len(ids), "max_model_len": state.cfg.max_model_len, "tokens": ids, "token_strs": strs})


async def metrics(request: web.Request) -> web.Response:
    """GET /metrics, after ``--fault-metrics-delay`` seconds when that fault is set."""
    state = request.app[STATE]
    if state.cfg.fault_metrics_delay:
        await asyncio.sleep(state.cfg.fault_metrics_delay)
    state.metrics.set_state(*state.engine.state())
    state.metrics.set_memory(state.sleep.memory())
    return web.Response(body=state.metrics.render(), headers={"Content-Type": METRICS_CONTENT_TYPE})


def embedding(text: str, dim: int) -> list[float]:
    """A unit-length vector of ``dim`` floats determined by ``text`` alone."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    rng = random.Random(seed)  # noqa: S311 - a reproducible vector, not a secret
    raw = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


async def embeddings(request: web.Request) -> web.Response:
    """POST /v1/embeddings: ``input`` a string, strings or token ids; ``encoding_format`` float or base64.

    Like every request for the model, it waits while the engine sleeps (vLLM queues it until the wake)."""
    state = request.app[STATE]
    body = await read_json(request)
    await state.sleep.resumed.wait()
    model = check_model(state, body.get("model"))
    raw = body.get("input")
    single = isinstance(raw, str) or (isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw))
    items = [raw] if single else raw
    if not isinstance(items, list) or not items or not all(isinstance(i, (str, list)) for i in items):
        raise APIError(400, "input must be a string, a list of strings or token ids.", param="input")
    texts = [item if isinstance(item, str) else str(item) for item in items]
    counts = [tokenizer.count(t) if isinstance(i, str) else len(i) for t, i in zip(texts, items, strict=True)]
    if max(counts) > state.cfg.max_model_len:
        raise APIError(
            400,
            f"This model's maximum context length is {state.cfg.max_model_len} tokens. However, you requested "
            f"{max(counts)} tokens in the input for embedding generation. Please reduce the length of the input.",
        )
    data = []
    for index, text in enumerate(texts):
        vector: Any = embedding(text, state.cfg.embedding_dim)
        if body.get("encoding_format") == "base64":
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"index": index, "object": "embedding", "embedding": vector})
    total = sum(counts)
    usage = {"prompt_tokens": total, "total_tokens": total, "completion_tokens": 0, "prompt_tokens_details": None}
    head = {"id": new_id("embd-"), "object": "list", "created": int(time.time()), "model": model}
    return reply({**head, "data": data, "usage": usage})


def _engine_died(task: "asyncio.Task[None]") -> None:
    """A crashed step loop would hang every request: exit instead, as vLLM does when EngineCore dies."""
    if not task.cancelled() and task.exception() is not None:
        log.error("EngineCore died unexpectedly", exc_info=task.exception())
        os._exit(1)


async def _lifetime(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE]
    engine_task = asyncio.create_task(state.engine.run())
    engine_task.add_done_callback(_engine_died)

    async def load() -> None:
        await asyncio.sleep(state.cfg.load_seconds)
        state.loaded = True
        log.info("Application startup complete.")

    load_task = asyncio.create_task(load())
    yield
    for task in (engine_task, load_task):
        task.cancel()


def create_app(cfg: SimConfig) -> web.Application:
    """The application for ``cfg``; the engine starts with the app and /health turns 200 after loading (and stays
    200 while the engine sleeps, as vLLM's does)."""
    cache_info = {
        "block_size": str(cfg.block_size),
        "num_gpu_blocks": str(cfg.num_blocks),
        "kv_cache_size_tokens": str(cfg.num_blocks * cfg.block_size),
        "kv_cache_max_concurrency": f"{cfg.num_blocks * cfg.block_size / cfg.max_model_len:.2f}",
        "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
        "cache_dtype": cfg.kv_cache_dtype,
        "enable_prefix_caching": str(cfg.enable_prefix_caching),
    }
    sim_metrics = SimMetrics(cfg.metrics_flavor, cfg.served_model_name, cache_info)
    app = web.Application(middlewares=[errors, loading, auth], client_max_size=64 * 1024 * 1024)
    engine = Engine(cfg, sim_metrics)
    app[STATE] = SimState(cfg=cfg, engine=engine, metrics=sim_metrics, sleep=Sleeper(cfg, engine))
    app.cleanup_ctx.append(_lifetime)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", openai_api.chat_completions)
    app.router.add_post("/v1/completions", completions_api.completions)
    app.router.add_post("/v1/embeddings", embeddings)
    if not cfg.no_responses:  # an engine without the Responses API answers it 404 (SGLang, older vLLM)
        app.router.add_post("/v1/responses", responses_api.responses)
    if not cfg.no_anthropic:  # an engine with only the OpenAI API answers these 404 (SGLang, older vLLM)
        app.router.add_post("/v1/messages", anthropic_api.messages)
        app.router.add_post("/v1/messages/count_tokens", anthropic_api.count_tokens)
    if cfg.dev_mode:  # vLLM adds its development routes only under VLLM_SERVER_DEV_MODE
        sleep_api.add_routes(app)
    return app
