"""What one request's relay is fixed to before its first byte goes out (``RelayPlan``), and how it is made.

``Planner.plan`` adjusts the client's request on its way to the engine: the output limit in the engine's
spelling, lowered to the key's or the deployment's cap (gateway.rewrite), fitted to the context left when the
deployment says so (gateway.context_fit), usage asked for on the client's behalf, or a translation to the
chat API for an engine that does not speak the client's API; it counts what the request reserves against the
key's limits and budgets (gateway.quotas), and reads the settings the relay needs. The plan is frozen: what
changes while the answer is relayed is gateway.relay_state.RelayState.
"""

import json
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError

from gateway import context_fit, errors, quotas
from gateway.errors import GatewayError, Surface
from gateway.prices import Prices, price_factor, scaled
from gateway.registry import KeyEntry, Route
from gateway.reservations import counter_keys
from gateway.rewrite import (
    Translation,
    ask_for_usage,
    cap_max_tokens,
    capped_header,
    capped_to,
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

Header = tuple[bytes, bytes]
# What a keep-alive is on each surface (gateway.relay's docstring says why a blank line for OpenAI clients).
KEEPALIVE = {Surface.OPENAI: b"\n", Surface.ANTHROPIC: b'event: ping\ndata: {"type": "ping"}\n\n'}


@dataclass(frozen=True, slots=True)
class RelayPlan:
    """One request's relay as fixed before its first byte: who asks, where it goes, what the engine is sent,
    how its answer reaches the client, and the settings that apply. Made by ``Planner.plan``; never changed.

    ``request`` is the client's parsed request with the adjusted fields set (a Responses translation echoes
    it; a stream cut short has its prompt counted from it): nothing writes to it once the plan is made."""

    key: KeyEntry  # the API key's secret that authenticated the request (its id, prefix and quota)
    route: Route  # the model's ready replicas
    endpoint: str  # the client's path, e.g. /v1/messages
    surface: Surface  # the client's API: its errors' shape and its keep-alive
    stream: bool  # the client asked for a stream
    arrived: float  # monotonic seconds the request arrived: TTFT and duration count from here
    engine_path: str  # where the engine is sent it: the client's path, or the chat API's or /tokenize
    body: bytes  # the engine's request body (JSON)
    prefix: bytes  # the prompt prefix's digest the router places it by; b"" with a single replica
    kind: StreamKind  # the event stream the engine answers with (CHAT when translated)
    request: dict[str, Any]
    keepalive_every: float  # seconds of engine silence before a keep-alive: HEARTH_SSE_KEEPALIVE
    idle_timeout: float  # seconds: HEARTH_STREAM_IDLE_TIMEOUT, as the error of a stream cut for it says
    retry_after: int  # seconds a client is told to wait when no replica can be reached
    translation: Translation = Translation.NONE  # how the engine's answer becomes the client's
    strip_usage: bool = False  # usage was asked for on the client's behalf: its chunk is not relayed
    headers: tuple[Header, ...] = ()  # added to the response head: the caps and fits applied
    reserve: int = 0  # tokens held against the key's limits and budgets from admission to settlement
    reserve_prompt: int = 0  # of those, the prompt's: priced at the input price where the price is "input,output"
    prompt_counted: int | None = None  # the prompt's tokens as the engine counted them for the reservation; None: not
    hops: str = ""  # the hop header it is sent on with (gateway.loops); "" for the engines' default
    priority: str = "standard"  # the class it runs at: its key's, or "batch" for a Batch API line
    batch_id: str = ""  # the Batch's public id (batch_...) for a Batch API line; "" otherwise
    max_tokens_fitted: int | None = None  # the output limit lowered to fit the context (``fit``); None: as asked
    ratelimits: tuple[Header, ...] = ()  # what the key's limits leave, set at admission (gateway.ratelimit_headers)

    @property
    def model(self) -> str:
        return self.route.served_model_name

    @property
    def head_headers(self) -> tuple[Header, ...]:
        """The headers the answer's head carries beside its content type: the caps and fits, the limits left."""
        return (*self.headers, *self.ratelimits)

    @property
    def keepalive(self) -> bytes:
        """What a keep-alive is on the client's surface."""
        return KEEPALIVE[self.surface]

    def output_limits(self) -> dict[str, Any]:
        """The request-log fields of the output limit the gateway sent instead of the client's (gateway.accounting's
        Outcome): fitted to the context, and set by a cap (its limit and whose cap)."""
        capped, by = capped_to(self.headers) or (None, "")
        return {"max_tokens_fitted": self.max_tokens_fitted, "max_tokens_capped": capped, "max_tokens_capped_by": by}


class Planner:
    """Makes plans; asks a replica's engine to count a prompt when a fit or a reservation needs it, and reads a
    deployment's price (gateway.prices, from ``redis``) when a budget may set a request's output limit."""

    def __init__(self, engines: Engines, router: Router, prices: Prices, redis: aioredis.Redis) -> None:
        self.engines, self.router, self.prices, self.redis = engines, router, prices, redis

    async def plan(
        self,
        path: str,
        body: bytes,
        request: dict[str, Any],
        key: KeyEntry,
        route: Route,
        surface: Surface,
        kind: StreamKind,
        arrived: float,
        hops: str = "",
    ) -> RelayPlan:
        """The plan of a POST of ``body`` (``request`` parsed; the adjusted fields are set in it) to ``path``,
        sent on with the hop header ``hops``. Raises GatewayError 400 for a request that cannot be translated to
        the chat API."""
        fields = engine_spelling(path, request)
        request.update(fields)
        unasked = (output_limit(path, request) or ("", 0))[1] is None  # before a cap or a fit sets one
        capped, headers = _cap(path, request, key, route)
        fields |= capped
        # the prompt-prefix digest only matters where there is a replica to choose
        prefix = prefix_key(route.served_model_name, request) if len(route.upstreams) > 1 else b""
        fitted: dict[str, int] = {}
        if route.fit_max_tokens:
            fitted, fit_headers = await self.fit(path, request, fields, len(body), route, prefix, surface)
            fields, headers = fields | fitted, headers + fit_headers
        adjusted = {**request, **fields}
        _within_context(path, adjusted, route)
        reserve, (reserve_prompt, prompt_counted), (limited, limited_by) = await self._to_reserve(
            path, adjusted, len(body), route, prefix, key, unasked
        )
        if limited:
            asked = (output_limit(path, adjusted) or ("", None))[1]
            headers.append(capped_header(asked, next(iter(limited.values())), limited_by))
            fields |= limited
        engine_path, translation, strip_usage = path, Translation.NONE, False
        if not takes_as_sent(path, route):
            request.update(fields)
            try:
                engine_path, chat, translation = translate_for_chat_engine(path, request)
            except TranslationError as exc:
                raise GatewayError(400, str(exc)) from None
            kind, body = StreamKind.CHAT, json.dumps(chat).encode()
        else:
            usage = ask_for_usage(path, request)
            strip_usage = bool(usage)
            if fields or usage:
                body = with_fields(body, request, {**fields, **usage})
        return RelayPlan(
            key=key,
            route=route,
            endpoint=path,
            surface=surface,
            stream=bool(request.get("stream")),
            arrived=arrived,
            engine_path=engine_path,
            body=body,
            prefix=prefix,
            kind=kind,
            request=request,
            keepalive_every=settings.HEARTH_SSE_KEEPALIVE,
            idle_timeout=settings.HEARTH_STREAM_IDLE_TIMEOUT,
            retry_after=max(1, int(settings.HEARTH_RECONCILE_INTERVAL)),
            translation=translation,
            strip_usage=strip_usage,
            headers=tuple(headers),
            reserve=reserve,
            reserve_prompt=reserve_prompt,
            prompt_counted=prompt_counted,
            hops=hops,
            priority=key.priority,
            max_tokens_fitted=next(iter(fitted.values()), None),
        )

    async def fit(
        self,
        path: str,
        request: dict[str, Any],
        fields: dict[str, Any],
        body_bytes: int,
        route: Route,
        prefix: bytes,
        surface: Surface,
    ) -> tuple[dict[str, int], list[Header]]:
        """The output limit lowered to what the context leaves (gateway.context_fit), with the response header
        saying so; ({}, []) when the request fits or its prompt could not be counted. Raises GatewayError 400
        (errors.prompt_too_long) for a prompt that leaves no room for an answer."""
        name, asked = output_limit(path, {**request, **fields}) or ("", None)
        if asked is None or not route.upstreams:
            return {}, []
        if not context_fit.may_overflow(asked, body_bytes, route.max_model_len):
            return {}, []
        tokenize = tokenize_request(path, request)
        upstream = self.router.order(route, prefix)[0]
        prompt = await context_fit.count_prompt(self.engines, upstream, tokenize) if tokenize else None
        if prompt is None:
            return {}, []
        if prompt >= route.max_model_len:
            field = {"/v1/completions": "prompt", "/v1/responses": "input"}.get(path, "messages")
            raise errors.prompt_too_long(prompt, route.max_model_len, surface, field)
        # the engine renders a request it takes on its own Anthropic or Responses API: not what /tokenize counted
        own_rendering = path in OWN_APIS and takes_as_sent(path, route)
        fitted = context_fit.fitted_limit(asked, prompt, route.max_model_len, own_rendering)
        if fitted is None:
            return {}, []
        return {name: fitted}, [context_fit.fitted_header(asked, fitted, prompt, route.max_model_len)]

    async def _to_reserve(
        self,
        path: str,
        request: dict[str, Any],
        body_bytes: int,
        route: Route,
        prefix: bytes,
        key: KeyEntry,
        unasked: bool,
    ) -> tuple[int, tuple[int, int | None], tuple[dict[str, int], str]]:
        """The tokens a request of a key with a token limit or a budget reserves (gateway.quotas' docstring), its
        prompt's part of them (its prompt as the engine counts it, else bounded by its size) with the engine's count
        (None: not counted), and the output limit set, with what set it, where its key's token limit or budget is
        under what it would reserve (quotas.output_within_limit, told what is left where the client asked none:
        ``unasked``; ({}, "") otherwise); (0, (0, None), ({}, "")) for any other key."""
        if not key.quota.counts_tokens:
            return 0, (0, None), ({}, "")
        upstream = self.router.order(route, prefix)[0] if route.upstreams else None
        tokenize = tokenize_request(path, request)
        prompt, counted = await context_fit.prompt_at_most(self.engines, upstream, tokenize, body_bytes)
        price, used = await self._price_and_used(path, request, route, key, unasked)
        limited = quotas.output_within_limit(path, request, prompt, route.max_model_len, key.quota, price, used)
        reserve = quotas.tokens_to_reserve(path, request | limited[0], prompt, route.max_model_len)
        return reserve, (prompt, counted), limited

    async def _price_and_used(
        self, path: str, request: dict[str, Any], route: Route, key: KeyEntry, unasked: bool
    ) -> tuple[str, quotas.Used | None]:
        """For a request with an output limit the key's limits may lower (quotas.output_within_limit): the
        deployment's USD per token as admission will price it (its class's factor applied; "" for a key without a
        budget) and, where its client asked for none (``unasked``; a cap may have set one since), what the key's
        counters hold now (None where it asked for one). ("", None) when Redis does not answer: the admission then
        says so."""
        if output_limit(path, request) is None:
            return "", None
        budgeted = any(b is not None for b in key.quota.budgets())
        try:
            price = await self.prices.get(self.redis, route.deployment_id) if budgeted else ""
            used = await self._used(key, route) if unasked else None
        except (RedisError, OSError):
            return "", None
        return scaled(price, price_factor(key.priority)), used

    async def _used(self, key: KeyEntry, route: Route) -> quotas.Used:
        """What the key's token and USD counters hold now (gateway.reservations.counter_keys), in one read."""
        names = counter_keys(key.id, key.quota.owner_id, route.deployment_id, time.time())
        values = [int(v or 0) for v in await self.redis.mget([names[1], names[2], *names[4:8]])]
        return quotas.Used(values[0], values[1], (values[2], values[3], values[4], values[5]))


OWN_APIS = ("/v1/messages", "/v1/responses")  # the APIs an engine may speak itself or have translated to chat


def takes_as_sent(path: str, route: Route) -> bool:
    """Whether ``route``'s engine takes a request to ``path`` on the API it was sent to: OpenAI's chat,
    completions and embeddings always; Anthropic's (``/v1/messages``, its ``count_tokens``) and the Responses API
    where the engine speaks them (``Route.speaks_anthropic``, ``speaks_responses``), else translated to chat."""
    if path.startswith("/v1/messages"):
        return route.speaks_anthropic
    return path != "/v1/responses" or route.speaks_responses


def _within_context(path: str, request: dict[str, Any], route: Route) -> None:
    """Raises GatewayError 400, naming the client's own field, for an output limit over the deployment's whole
    context (its max_model_len holds the prompt and the answer together) that no fit lowered (``fit_max_tokens``
    off, or a prompt the engine could not count): vLLM's refusal names ``max_completion_tokens`` to a /v1/messages
    client (it checks the chat API's request), a trial found. A limit the prompt leaves no room for is the
    engine's to refuse."""
    name, asked = output_limit(path, request) or ("", None)
    if not route.max_model_len or asked is None or asked <= route.max_model_len:
        return
    raise GatewayError(
        400,
        f"{name} is {asked:,}, more than this model's whole context of {route.max_model_len:,} tokens (max_model_len), "
        "which holds the prompt and the answer together; ask for fewer.",
        param=name,
    )


def _cap(path: str, request: dict[str, Any], key: KeyEntry, route: Route) -> tuple[dict[str, int], list[Header]]:
    """The output limit lowered to the key's or the deployment's cap, the lower of the two, with the response
    header saying so (gateway.rewrite.capped_header); ({}, []) when the request is within it."""
    caps = [c for c in (key.max_tokens_cap, route.max_tokens_cap) if c is not None]
    if not caps:
        return {}, []
    cap = min(caps)
    capped = cap_max_tokens(path, request, cap)
    if not capped:
        return {}, []
    asked = (output_limit(path, request) or ("", None))[1]
    return capped, [capped_header(asked, cap, "key" if key.max_tokens_cap == cap else "deployment")]
