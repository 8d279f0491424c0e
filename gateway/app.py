"""The /v1 gateway: a lean ASGI app (no Django request cycle, no DB query on the hot path).

Upstream client: gateway.upstream (an asyncio protocol with httptools' parser), chosen by benchmark as
../shared/FACTS.md asks (there, at 64 streams an httpx relay kept 0.30–0.46 of direct throughput and
aiohttp 0.98–1.00; gateway.upstream's docstring has its own figures against aiohttp). Auth and routing
read an in-process snapshot that Redis invalidates (gateway.registry); the relay itself is
gateway.relay; each finished request is recorded by gateway.accounting. A client that goes away
cancels the upstream request at once.
"""

import asyncio
import gc
import json
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Any

from django.conf import settings

from gateway import context_fit, errors, probes, quotas
from gateway.accounting import Outcome, count_refusal, flush, record
from gateway.answers import for_request
from gateway.asgi_io import Receive, Scope, Send, send_json
from gateway.errors import GatewayError, Surface
from gateway.prices import Prices
from gateway.registry import KeyEntry, Registry, Route, Snapshot
from gateway.registry import authenticate as authenticate_key
from gateway.relay import Exchange
from gateway.request_body import parse_body, read_body
from gateway.reservations import Reservation, Reservations
from gateway.rewrite import (
    ask_for_usage,
    cap_max_tokens,
    capped_header,
    engine_spelling,
    output_limit,
    tokenize_request,
    translate_for_chat_engine,
    with_fields,
)
from gateway.routing import Router, prefix_key
from gateway.sse import StreamKind
from gateway.translate import TranslationError
from gateway.upstream import Engines

log = logging.getLogger(__name__)
REFUSED_BEFORE_RELAY = {400, 401, 403, 404, 405, 413, 503}  # answered by the gateway alone (400: a bad body)

# POST endpoints relayed to the engine serving the body's model: path → (stream kind, error surface).
POST_ROUTES: dict[str, tuple[StreamKind, Surface]] = {
    "/v1/chat/completions": (StreamKind.CHAT, Surface.OPENAI),
    "/v1/completions": (StreamKind.CHAT, Surface.OPENAI),
    "/v1/embeddings": (StreamKind.CHAT, Surface.OPENAI),
    "/v1/responses": (StreamKind.RESPONSES, Surface.OPENAI),
    "/v1/messages": (StreamKind.MESSAGES, Surface.ANTHROPIC),
    "/v1/messages/count_tokens": (StreamKind.MESSAGES, Surface.ANTHROPIC),
}
PROBE_PATHS = ("/health", "/ready")  # open to anyone, answered before Django (gateway.probes)
# GET endpoints the gateway answers itself (OpenAI's surface), as paths with their one parameter named.
MODELS_PATH = "/v1/models"
GET_ROUTES = (MODELS_PATH, MODELS_PATH + "/{model}")


class Gateway:
    def __init__(self) -> None:
        prices = Prices()
        self.registry = Registry(prices)
        self.router = Router()
        self.reservations = Reservations(prices)
        self.engines = Engines(connect_timeout=10, read_timeout=settings.HEARTH_STREAM_IDLE_TIMEOUT)

    async def lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # What start-up loaded (Django, the apps, their modules) lives as long as the process: moved
                # out of the collector's reach, a full collection scans what requests allocate, not ~70 MB
                # of it (those collections paused the event loop ~50 ms each, once every few hundred requests).
                gc.freeze()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await flush()
                self.engines.close()
                await self.registry.close()
                await self.reservations.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def probe(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``/health`` or ``/ready`` (gateway.probes)."""
        if scope["path"] == "/health":
            await probes.health(send)
        else:
            await probes.ready(self.registry, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["hearth.arrived"] = time.monotonic()  # user-visible TTFT and duration count from here
        path = scope["path"].rstrip("/")
        surface = Surface.ANTHROPIC if path.startswith("/v1/messages") else Surface.OPENAI
        tracked = _Tracked(send)
        try:
            await self._dispatch(scope, path, receive, tracked)
        except GatewayError as exc:
            if exc.status in REFUSED_BEFORE_RELAY and not exc.recorded:  # the rest gateway.accounting counted
                count_refusal(surface, exc.status)
            retry = [(b"retry-after", str(exc.retry_after).encode())] if exc.retry_after is not None else []
            allow = [(b"allow", exc.allow.encode())] if exc.allow else []
            await send_json(send, exc.status, exc.body(surface), retry + allow)
        except RecursionError:  # JSON that parsed but is nested too deeply to encode again or digest
            if not tracked.started:
                count_refusal(surface, 400)
                nested = GatewayError(400, "The request body is JSON nested too deeply.")
                await send_json(send, 400, nested.body(surface))
        except Exception:  # a bug must still answer in the API's shape, never a plain-text 500
            log.exception("unexpected error on %s", path)
            if not tracked.started:
                count_refusal(surface, 500)
                error = GatewayError(500, "The gateway failed on this request; it is logged.", type="server_error")
                await send_json(send, 500, error.body(surface))

    async def _dispatch(self, scope: Scope, path: str, receive: Receive, send: Send) -> None:
        method, arrived, offered = scope["method"], scope["hearth.arrived"], _api_keys(scope)
        snapshot, entry = await self.registry.resolve(arrived, lambda s: (s, authenticate(s, offered)))
        if method == "GET" and path == MODELS_PATH:
            await send_json(send, 200, json.dumps({"object": "list", "data": _models(snapshot, entry)}).encode())
        elif method == "GET" and path.startswith(MODELS_PATH + "/"):
            name = path.removeprefix(MODELS_PATH + "/")
            found = await self.registry.resolve(arrived, lambda s: _model(s, authenticate(s, offered), name))
            await send_json(send, 200, json.dumps(found).encode())
        elif method == "POST" and path in POST_ROUTES:
            await self._relay(path, offered, receive, send, arrived)
        elif path in POST_ROUTES or path == MODELS_PATH or path.startswith(MODELS_PATH + "/"):
            allow = "POST" if path in POST_ROUTES else "GET"
            raise GatewayError(405, f"{scope['path']} takes {allow}, not {method}.", code="method_not_allowed",
                               allow=allow)  # fmt: skip
        else:
            raise GatewayError(404, f"Unknown endpoint {method} {scope['path']}.", code="unknown_url")

    async def _relay(self, path: str, offered: list[str], receive: Receive, send: Send, arrived: float) -> None:
        """Relay a POST to a replica of the body's model, adjusting the request on the way: the output
        limit in the engine's spelling, the key's and deployment's caps, fitted to the context left when the
        deployment says so, usage asked for on the client's behalf, or a translation to the chat API for an
        engine that does not speak the client's API."""
        body = await read_body(receive)
        request = parse_body(body)
        entry, route = await self.registry.resolve(arrived, lambda s: _key_and_route(s, offered, request))
        kind, surface = POST_ROUTES[path]
        outcome = Outcome(entry.id, entry.prefix, route.served_model_name, surface, path, bool(request.get("stream")))
        exchange = Exchange(self.engines, route, outcome, kind, self.router)
        exchange.started = arrived  # as the client counts: reading the body and choosing a replica included
        exchange.request, exchange.tally = request, for_request(path, request)
        fields = engine_spelling(path, request)
        request.update(fields)
        fields |= self._cap(path, request, entry, route, exchange)
        # the prompt-prefix digest only matters where there is a replica to choose
        prefix = prefix_key(route.served_model_name, request) if len(route.upstreams) > 1 else b""
        if route.fit_max_tokens:
            fields |= await self._fit(path, request, fields, len(body), route, prefix, exchange)
        reserve = await self._to_reserve(path, {**request, **fields}, len(body), route, prefix, entry)
        engine_path = path
        translate = (surface == Surface.ANTHROPIC and not route.speaks_anthropic) or (
            path == "/v1/responses" and not route.speaks_responses
        )
        if translate:
            request.update(fields)
            try:
                engine_path, chat, exchange.translation = translate_for_chat_engine(path, request)
            except TranslationError as exc:
                raise GatewayError(400, str(exc)) from None
            exchange.kind, body = StreamKind.CHAT, json.dumps(chat).encode()
        else:
            usage = ask_for_usage(path, request)
            exchange.strip_usage = bool(usage)
            if fields or usage:
                body = with_fields(body, request, {**fields, **usage})
        await self._exchange(exchange, entry, engine_path, body, prefix, receive, send, reserve)

    async def _exchange(
        self, exchange: Exchange, entry: KeyEntry, path: str, body: bytes, prefix: bytes, receive: Receive,
        send: Send, reserve: int,
    ) -> None:  # fmt: skip
        """Run the exchange under the key's limits and budgets (``reserve`` tokens held from admission to
        settlement, gateway.reservations), and record it however it ends."""
        outcome, quota, held = exchange.outcome, entry.quota, None
        try:
            if quota.any:
                held = await self.reservations.admit(entry.id, quota, exchange.route.deployment_id, reserve)
            await _until_client_leaves(exchange.run(path, body, prefix, send), receive, exchange)
        except GatewayError as exc:
            outcome.status = exc.status  # refusals are logged and counted as errors, never as successes
            raise replace(exc, recorded=True) from None
        finally:
            outcome.duration_seconds = time.monotonic() - exchange.started
            if exchange.events_out and (outcome.client_cancelled or outcome.truncated or not outcome.usage):
                outcome.usage = await self._usage_so_far(exchange)
            outcome.counts = exchange.tally.result(outcome.finish_reason)
            if held is not None or not quota.any:  # a refused request holds nothing and is charged nothing
                outcome.cost_usd = await self._settle(held, entry, exchange)
            await record(outcome)

    async def _to_reserve(
        self, path: str, request: dict[str, Any], body_bytes: int, route: Route, prefix: bytes, entry: KeyEntry
    ) -> int:
        """The tokens a request of a key with a token limit or a budget reserves (gateway.quotas' docstring):
        its prompt as the engine counts it, else bounded by its size; 0 for any other key."""
        if not entry.quota.counts_tokens:
            return 0
        upstream = self.router.order(route, prefix)[0] if route.upstreams else None
        prompt = await context_fit.prompt_at_most(self.engines, upstream, tokenize_request(path, request), body_bytes)
        return quotas.tokens_to_reserve(path, request, prompt, route.max_model_len)

    async def _settle(self, held: Reservation | None, entry: KeyEntry, exchange: Exchange) -> Decimal | None:
        """Settle the request's reservation with the tokens it used (prompt + completion); the USD charged."""
        prompt, completion, _ = exchange.outcome.tokens()
        used = (prompt or 0) + (completion or 0)
        return await self.reservations.settle(held, entry.id, entry.quota.owner_id, exchange.route.deployment_id, used)

    def _cap(
        self, path: str, request: dict[str, Any], entry: KeyEntry, route: Route, exchange: Exchange
    ) -> dict[str, int]:
        """The output limit lowered to the key's or the deployment's cap, the lower of the two, with the response
        header saying so (gateway.rewrite.capped_header); empty when the request is within it."""
        caps = [c for c in (entry.max_tokens_cap, route.max_tokens_cap) if c is not None]
        if not caps:
            return {}
        cap = min(caps)
        capped = cap_max_tokens(path, request, cap)
        if capped:
            asked = (output_limit(path, request) or ("", None))[1]
            exchange.headers.append(capped_header(asked, cap, "key" if entry.max_tokens_cap == cap else "deployment"))
        return capped

    async def _fit(
        self, path: str, request: dict[str, Any], fields: dict[str, Any], body_bytes: int, route: Route,
        prefix: bytes, exchange: Exchange,
    ) -> dict[str, int]:  # fmt: skip
        """The output limit lowered to what the context leaves (gateway.context_fit), with the response
        header saying so; empty when the request fits or its prompt could not be counted."""
        name, asked = output_limit(path, {**request, **fields}) or ("", None)
        if asked is None or not route.upstreams:
            return {}
        if not context_fit.may_overflow(asked, body_bytes, route.max_model_len):
            return {}
        tokenize = tokenize_request(path, request)
        upstream = self.router.order(route, prefix)[0]
        prompt = await context_fit.count_prompt(self.engines, upstream, tokenize) if tokenize else None
        fitted = context_fit.fitted_limit(asked, prompt, route.max_model_len) if prompt is not None else None
        if fitted is None or prompt is None:
            return {}
        exchange.headers.append(context_fit.fitted_header(asked, fitted, prompt, route.max_model_len))
        return {name: fitted}

    async def _usage_so_far(self, exchange: Exchange) -> dict[str, Any]:
        """The usage of a stream that went out in part, or without the engine's own count (the client left,
        or the engine cut it): what the engine reported so far, its output raised to the generated events
        sent (each at least one token), and a missing prompt count asked of the engine's /tokenize, so a
        cancelled request is billed and counted against the key's quotas."""
        outcome = exchange.outcome
        usage = dict(outcome.usage)
        prompt, completion, _ = outcome.tokens()
        if prompt is not None and completion is not None and completion >= exchange.token_chunks:
            return usage  # the engine's own count covers what was sent
        outcome.usage_estimated = True
        output = "output_tokens" if "input_tokens" in usage and "prompt_tokens" not in usage else "completion_tokens"
        usage[output] = max(completion or 0, exchange.token_chunks)  # Anthropic's and Responses' name, or chat's
        tokenize = tokenize_request(outcome.endpoint, exchange.request) if prompt is None else None
        if tokenize and exchange.route.upstreams:
            counted = await context_fit.count_prompt(self.engines, exchange.route.upstreams[0], tokenize)
            usage |= {"prompt_tokens": counted} if counted is not None else {}
        return usage


class _Tracked:
    """The server's ``send``, noting whether anything was sent (``started``). A plain callable returning the
    server's awaitable rather than a coroutine of its own: it is called for every relayed chunk."""

    def __init__(self, send: Send) -> None:
        self.send, self.started = send, False

    def __call__(self, message: Mapping[str, Any]) -> Awaitable[None]:
        self.started = True
        return self.send(message)


async def _until_client_leaves(work: Awaitable[None], receive: Receive, exchange: Exchange) -> None:
    """Run the relay in this task; if the client disconnects before its answer is out, cancel the relay
    (aborting the engine's request) at once. A side task waits for the disconnect, so the relay itself
    starts without a task switch."""
    relay = asyncio.current_task()
    assert relay is not None  # called from a request's task
    gone = asyncio.ensure_future(_cancel_when_gone(receive, relay, exchange))
    try:
        await work
    except asyncio.CancelledError:
        if not exchange.outcome.client_cancelled:
            raise
        relay.uncancel()
        log.info("client left; upstream request to %s aborted", exchange.outcome.model)
    finally:
        gone.cancel()


def _api_keys(scope: Scope) -> list[str]:
    """The keys offered in ``x-api-key`` and ``Authorization: Bearer``, in that order, empty ones left out.
    Raises GatewayError 401 when there is none."""
    headers: dict[bytes, bytes] = dict(scope["headers"])
    auth = headers.get(b"authorization", b"").decode("latin-1")
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    keys = [k for k in (headers.get(b"x-api-key", b"").decode("latin-1").strip(), bearer) if k]
    if not keys:
        raise errors.missing_key()
    return keys


def authenticate(snapshot: Snapshot, offered: list[str]) -> KeyEntry:
    """The live Hearth key among those the request offers (``_api_keys``): a client may send one header
    with its Hearth key and the other with something else (Claude Code with both ANTHROPIC_API_KEY and
    ANTHROPIC_AUTH_TOKEN set): the other one is ignored. Nothing else in the request names a key or a
    user (no identity header is believed). Raises GatewayError 401 when none authenticates, the most
    telling refusal first (expired or rotated out before wrong)."""
    refusals = []
    for key in offered:
        try:
            return authenticate_key(snapshot, key)
        except GatewayError as exc:
            refusals.append(exc)
    raise ([e for e in refusals if e != errors.invalid_key()] or refusals)[0]


def _key_and_route(snapshot: Snapshot, offered: list[str], request: dict[str, Any]) -> tuple[KeyEntry, Route]:
    entry = authenticate(snapshot, offered)
    return entry, _route(request, snapshot, entry)


def _model(snapshot: Snapshot, entry: KeyEntry, name: str) -> dict[str, object]:
    """The model object of ``name`` when this key may see it ready. Raises GatewayError 404 otherwise."""
    for model in _models(snapshot, entry):
        if model["id"] == name:
            return model
    raise errors.unknown_model(name)


def _route(request: dict[str, Any], snapshot: Snapshot, entry: KeyEntry) -> Route:
    """The route of the body's model. A model the key may not use is 403 whatever its state, so a key
    learns nothing of the models it cannot use."""
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise GatewayError(400, "The request body needs a 'model' string.", param="model")
    if not entry.allows(model):
        raise errors.model_not_allowed(model)
    route = snapshot.routes.get(model)
    if route is not None:
        return route
    if model in snapshot.states:
        raise errors.not_ready(model, snapshot.states[model], max(1, int(settings.HEARTH_RECONCILE_INTERVAL)))
    raise errors.unknown_model(model)


def _models(snapshot: Snapshot, entry: KeyEntry) -> list[dict[str, object]]:
    """The ready models this key may use, as OpenAI's model objects (plus vLLM's max_model_len)."""
    return [
        {"id": r.served_model_name, "object": "model", "created": r.created, "owned_by": "hearth",
         "max_model_len": r.max_model_len}
        for r in snapshot.routes.values()
        if entry.allows(r.served_model_name)
    ]  # fmt: skip


async def _cancel_when_gone(receive: Receive, relay: asyncio.Task[Any], exchange: Exchange) -> None:
    while (await receive())["type"] != "http.disconnect":  # uvicorn also says so once the answer is complete
        pass
    if not exchange.answered:
        exchange.outcome.client_cancelled = True
        relay.cancel()
