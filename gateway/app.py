"""The /v1 gateway: a lean ASGI app (no Django request cycle, no DB query on the hot path).

Upstream client: gateway.upstream (an asyncio protocol with httptools' parser), chosen by benchmark as
../shared/FACTS.md asks (there, at 64 streams an httpx relay kept 0.30–0.46 of direct throughput and aiohttp
0.98–1.00; gateway.upstream's docstring has its own figures against aiohttp). Auth and routing read an in-process
snapshot that Redis invalidates (gateway.registry; who a request is and where its model is: gateway.callers); each
relayed request is planned before its first byte (gateway.relay_plan), relayed (gateway.relay), and recorded however
it ended (gateway.accounting). A request for a model put aside to share the GPUs waits for its wake first
(gateway.holding). A client that goes away cancels the upstream request at once. A request that came back to this
Hearth is refused before anything else (gateway.loops); a new connection to an endpoint Hearth did not launch goes
only where the address policy allows (gateway.connect_policy). A request body comes decoded when it was compressed
(gateway.request_body); count_tokens is answered with an estimate where the engine cannot count
(gateway.count_tokens); a request a wrong base URL sent (``/v1/v1/...``, an endpoint without ``/v1``) gets the fix
(gateway.wrong_urls). Every answer's head carries the request's id (gateway.request_ids), added once, as it goes
out. A request refused before an engine was chosen leaves its request-log row too, once its key authenticated or
was refused although genuine (revoked, expired: gateway.refusals). The Files and Batches API is gateway.batch_api's;
a Batch API line the worker's runner sends is served as its batch owner's key and answered once
(gateway.batch_lines). At the stop, the requests uvicorn cancelled are waited for before the ledger stops
(gateway.open_requests).
"""

import functools
import gc
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from django.conf import settings

from appliance.hop_marker import marker
from console.batches.credential import LineCredential
from gateway import batch_api, batch_lines, context_fit, count_tokens, errors, loops, probes, refusals, wrong_urls
from gateway.accounting import Outcome, count_refusal
from gateway.asgi_io import Receive, Scope, Send, send_json
from gateway.callers import authenticate, key_and_route, model_object, offered_keys
from gateway.connect_policy import AddressGate
from gateway.errors import GatewayError, Surface
from gateway.holding import Holding, woken_plan
from gateway.lanes import Lanes
from gateway.ledger import Ledger
from gateway.model_list import model_list
from gateway.open_requests import OpenRequests
from gateway.prices import Prices
from gateway.ratelimit_headers import ratelimit_headers
from gateway.registry import Registry
from gateway.relay import Relay
from gateway.relay_plan import Planner, RelayPlan
from gateway.request_body import CLIENT_LEFT, ClientLeft, check_fields, decode_body, parse_body, read_body
from gateway.request_ids import HEADER, RequestIds, request_ids
from gateway.reservations import Reservations
from gateway.rewrite import tokenize_request
from gateway.routing import Router
from gateway.sse import StreamKind
from gateway.stream_errors import error_event
from gateway.upstream import Engines

log = logging.getLogger(__name__)
# answered by the gateway alone (400: a bad body; 415: a Content-Encoding it does not decode)
REFUSED_BEFORE_RELAY = {400, 401, 403, 404, 405, 413, 415, 503, 508}

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


def is_endpoint(path: str) -> bool:
    """Whether ``path`` is one of the gateway's endpoints (POST_ROUTES, GET_ROUTES, the Files and Batches API)."""
    models = path == MODELS_PATH or path.startswith(MODELS_PATH + "/")
    return path in POST_ROUTES or models or batch_api.is_endpoint(path)


def misdirected(scope: Scope) -> bool:
    """Whether a request outside /v1 is for one of the gateway's endpoints without its ``/v1`` (a base URL set
    without it), the gateway's to answer with the fix (gateway.wrong_urls)."""
    return wrong_urls.outside_v1(scope["path"], scope["headers"], is_endpoint)


class Gateway:
    def __init__(self) -> None:
        prices = Prices()
        self.registry = Registry(prices)
        self.router = Router()
        self.reservations = Reservations(prices)
        self.ledger = Ledger(self.reservations)
        self.engines = Engines(
            connect_timeout=10,
            read_timeout=settings.HEARTH_STREAM_IDLE_TIMEOUT,
            hop=marker(),
            admit=AddressGate(),
        )
        self.planner = Planner(self.engines, self.router, prices, self.reservations.redis)
        self.holding = Holding(self.registry)
        self.lanes = Lanes(self.reservations.redis, self.engines)
        self.open = OpenRequests()  # the requests under way, waited for at the stop

    async def lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # What start-up loaded (Django, the apps, their modules) lives as long as the process: moved
                # out of the collector's reach, a full collection scans what requests allocate, not ~70 MB
                # of it (those collections paused the event loop ~50 ms each, once every few hundred requests).
                gc.freeze()
                self.ledger.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.open.let_end()  # before the ledger and the Redis clients stop
                await self.ledger.stop()
                await self.lanes.close()
                self.engines.close()
                await self.registry.close()
                await self.reservations.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def probe(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``/health`` or ``/ready`` (gateway.probes), with its request id."""
        tracked = _Tracked(send, request_ids(scope["headers"]).answered)
        if scope["path"] == "/health":
            await probes.health(tracked)
        else:
            await probes.ready(self.registry, tracked)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["hearth.arrived"] = time.monotonic()  # user-visible TTFT and duration count from here
        self.open.add()
        path = scope["path"].rstrip("/")
        intended = wrong_urls.intended(path, is_endpoint)  # the endpoint a wrong base URL meant
        surface = wrong_urls.surface_of(intended or path)
        ids = request_ids(scope["headers"])
        tracked = _Tracked(send, ids.answered)
        try:
            await self._dispatch(scope, path, receive, tracked, intended, ids)
        except GatewayError as exc:
            if tracked.started:  # a held stream's head went out (gateway.holding): its error ends the stream
                event = error_event(exc, surface, responses=path == "/v1/responses")
                await send({"type": "http.response.body", "body": event, "more_body": False})
                return
            if exc.status in REFUSED_BEFORE_RELAY and not exc.recorded:  # the rest gateway.accounting counted
                count_refusal(surface, exc.status, scope.get("hearth.model", ""), self.registry.snapshot.states)
            if not exc.recorded:
                await self._log_refusal(scope, intended or path, surface, exc.status, ids, exc.message)
            retry = [(b"retry-after", str(exc.retry_after).encode())] if exc.retry_after is not None else []
            allow = [(b"allow", exc.allow.encode())] if exc.allow else []
            await send_json(tracked, exc.status, exc.body(surface), [*retry, *allow, *exc.headers])
        except ClientLeft:  # nothing to answer: its row says it was cancelled
            log.info("client left before its request body was whole (%s)", path)
            count_refusal(surface, CLIENT_LEFT)
            await self._log_refusal(scope, intended or path, surface, CLIENT_LEFT, ids)
        except RecursionError:  # JSON that parsed but is nested too deeply to encode again or digest
            if not tracked.started:
                nested = errors.nested_too_deeply()
                count_refusal(surface, 400)
                await self._log_refusal(scope, intended or path, surface, 400, ids, nested.message)
                await send_json(tracked, 400, nested.body(surface))
        except Exception:  # a bug must still answer in the API's shape, never a plain-text 500
            log.exception("unexpected error on %s (request id %s, ours %s)", path, ids.answered, ids.own)
            if not tracked.started:
                error = GatewayError(500, "The gateway failed on this request; it is logged.", type="server_error")
                count_refusal(surface, 500)
                await self._log_refusal(scope, intended or path, surface, 500, ids, error.message)
                await send_json(tracked, 500, error.body(surface))

    async def _log_refusal(
        self, scope: Scope, endpoint: str, surface: str, status: int, ids: RequestIds, error: str = ""
    ) -> None:
        """The request-log row of a request answered with ``status`` and the message ``error`` before an engine was
        chosen, when its key authenticated or was refused although genuine (``hearth.key``, set by ``_dispatch`` and
        gateway.callers.authenticate), its body's model and stream (``hearth.model``, ``hearth.stream``)."""
        if (key := scope.get("hearth.key")) is not None:
            outcome = refusals.refused(
                key,
                scope.get("hearth.model", ""),
                surface,
                endpoint,
                status,
                scope["hearth.arrived"],
                ids,
                scope.get("hearth.batch_id", ""),
                error,
                scope.get("hearth.stream", False),
            )
            await refusals.spool(self.reservations.redis, outcome)

    async def _dispatch(
        self, scope: Scope, path: str, receive: Receive, send: Send, intended: str | None, ids: RequestIds
    ) -> None:
        hops = loops.hops_onward(scope["headers"])  # before anything else: a request that came back goes no further
        method, arrived, offered = scope["method"], scope["hearth.arrived"], offered_keys(scope)
        snapshot, entry = await self.registry.resolve(arrived, lambda s: (s, authenticate(s, offered, scope)))
        scope["hearth.key"] = entry
        if intended is not None:
            raise await wrong_urls.refusal(self.reservations.redis, entry, scope, intended, arrived, ids)
        if method == "GET" and path == MODELS_PATH:
            await send_json(send, 200, json.dumps(model_list(snapshot, entry)).encode())
        elif method == "GET" and path.startswith(MODELS_PATH + "/"):
            name = path.removeprefix(MODELS_PATH + "/")
            found = await self.registry.resolve(arrived, lambda s: model_object(s, authenticate(s, offered), name))
            await send_json(send, 200, json.dumps(found).encode())
        elif method == "POST" and path in POST_ROUTES and (line := batch_lines.line_of(offered)) is not None:
            scope["hearth.batch_id"] = line.batch_id  # a Batch API line (gateway.batch_lines), answered once

            def relayed(answer: Send) -> Awaitable[None]:
                return self._relay(path, offered, scope, batch_lines.kept(receive), answer, arrived, hops, ids, line)

            await batch_lines.once(self.reservations.redis, line, send, relayed)
        elif method == "POST" and path in POST_ROUTES:
            await self._relay(path, offered, scope, receive, send, arrived, hops, ids)
        elif batch_api.is_endpoint(path):
            await batch_api.answer(method, path, scope, receive, send, entry)
        elif is_endpoint(path):
            allow = "POST" if path in POST_ROUTES else "GET"
            raise GatewayError(
                405, f"{scope['path']} takes {allow}, not {method}.", code="method_not_allowed", allow=allow
            )
        else:
            raise GatewayError(404, f"Unknown endpoint {method} {scope['path']}.", code="unknown_url")

    async def _relay(
        self,
        path: str,
        offered: list[str],
        scope: Scope,
        receive: Receive,
        send: Send,
        arrived: float,
        hops: str,
        ids: RequestIds,
        line: LineCredential | None = None,
    ) -> None:
        """Relay a POST to a replica of the body's model, as planned before its first byte (gateway.relay_plan:
        the request adjusted on its way, what it reserves, the settings that apply), with the hop header
        ``hops``, recorded under ``ids``. The body is decoded as its headers say (gateway.request_body); the model it
        names is noted in ``scope`` for a refusal's row. A Batch API ``line`` runs with its batch's id
        (gateway.batch_lines)."""
        body = await read_body(receive, scope["headers"])
        request = decode_body(body)
        scope["hearth.model"] = request["model"] if isinstance(request.get("model"), str) else ""
        scope["hearth.stream"] = request.get("stream") is True
        check_fields(request, path)  # after the model is noted: a refusal's row names it
        kind, surface = POST_ROUTES[path]
        key, route = await self.registry.resolve(arrived, lambda s: key_and_route(s, offered, request))
        if line is not None and route.asleep and not batch_lines.may_wake():
            raise batch_lines.asleep(route.served_model_name)
        plan = await self.planner.plan(path, body, request, key, route, surface, kind, arrived, hops)
        plan = replace(plan, batch_id=line.batch_id if line is not None else "")
        relay = Relay(plan, self.engines, self.router)
        if not route.asleep:
            await self._serve(relay, ids, receive, send)
            return

        async def woken() -> None:
            """Held for the wake (gateway.holding), then planned again on the ready route, from the body as sent
            (holding.woken_plan)."""
            ready = await self.holding.hold(relay.plan, relay.state, send)
            again = parse_body(body, path)
            planned = await self.planner.plan(path, body, again, key, ready, surface, kind, arrived, hops)
            relay.plan = woken_plan(planned, relay.plan, relay.state)

        await self._serve(relay, ids, receive, send, woken)

    async def _serve(
        self,
        relay: Relay,
        ids: RequestIds,
        receive: Receive,
        send: Send,
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Serve ``relay`` under its key's limits and budgets (the plan's ``reserve`` tokens held from admission
        to settlement, gateway.reservations), after ``before`` (a held request's wait), and record it however it
        ends, once (gateway.ledger: a refused request holds nothing and is charged nothing)."""
        plan, refused = relay.plan, None
        ticket = self.ledger.ticket(plan, relay.state, ids, receive)
        lane = self.lanes.ticket(relay, send, before)  # held while its deployment is saturated (gateway.lanes)
        try:
            if plan.key.quota.any:
                held = await self.ledger.admit(ticket, plan)
                limits = ratelimit_headers(plan.key.quota, held.counted, plan.surface, time.time())
                relay.plan = replace(relay.plan, ratelimits=limits)
                if plan.key.quota.max_concurrent is not None:
                    relay.before_end = functools.partial(self.ledger.free_slot, ticket)
            else:
                self.ledger.note(ticket)
            await self._answer(relay, receive, send, lane.before)
        except GatewayError as exc:
            refused = exc.status  # refusals are logged and counted as errors, never as successes
            relay.state.error = exc.message
            raise replace(exc, recorded=True) from None
        finally:
            lane.done()
            await relay.ending()  # a client that left, or one refused, may send its next request at once
            await self.ledger.close(ticket, await self._outcome(relay, refused))

    async def _answer(
        self, relay: Relay, receive: Receive, send: Send, before: Callable[[], Awaitable[None]] | None
    ) -> None:
        """``relay`` served; a count_tokens request the engine cannot count is answered with the gateway's
        estimate instead, said so in a header (gateway.count_tokens)."""
        if relay.plan.endpoint != count_tokens.COUNT_TOKENS_PATH:
            await relay.serve(receive, send, before)
            return
        held = count_tokens.HeldAnswer(relay.plan.route.max_model_len)
        try:
            await relay.serve(receive, held, before)
        except GatewayError as exc:
            if not count_tokens.cannot_count(exc.status, exc.code):
                raise
        else:
            if not count_tokens.cannot_count(held.status) and not held.over_context:
                await held.release(send)
                return
        relay.state.status, relay.state.error = 200, ""  # answered: the engine's refusal was not the client's
        headers = [count_tokens.ESTIMATED_HEADER, *relay.plan.head_headers]
        await send_json(send, 200, count_tokens.estimated_body(relay.plan.request, held.at_least), headers)

    async def _outcome(self, relay: Relay, refused: int | None) -> Outcome:
        """How the request ended, for gateway.accounting: the plan's fixed fields, what the relay's state says,
        and ``refused``, the status of a refusal, over the engine's."""
        plan, state = relay.plan, relay.state
        outcome = Outcome(
            plan.key.id,
            plan.key.prefix,
            plan.model,
            plan.surface,
            plan.endpoint,
            plan.stream,
            status=state.status if refused is None else refused,
            finish_reason=state.finish_reason,
            usage=state.usage,
            ttft_seconds=state.ttft_seconds,
            duration_seconds=time.monotonic() - plan.arrived,
            truncated=state.truncated,
            client_cancelled=state.client_gone,
            woke_engine=state.woke_engine,
            wake_seconds=state.wake_seconds,
            priority=plan.priority,
            batch_id=plan.batch_id,
            error=state.error,
            **(plan.output_limits() if state.asked_engine else {}),  # none applied to a request no engine got
        )
        # a client that left once the engine had its request: a whole answer, or a stream before its first event
        if (state.streamed or (state.client_gone and state.asked_engine)) and (
            state.client_gone or state.truncated or not state.usage
        ):
            outcome.usage = await self._usage_so_far(plan, outcome, state.token_chunks)
        outcome.counts = state.tally.result(outcome.finish_reason)
        return outcome

    async def _usage_so_far(self, plan: RelayPlan, outcome: Outcome, token_chunks: int) -> dict[str, Any]:
        """The usage of a stream that went out in part, or without the engine's own count (the client left, or the
        engine cut it), or of a request whose client left before any of its answer: what the engine reported so far,
        its output raised to the ``token_chunks`` generated events sent (each at least one token; 0 for a whole
        answer, whose output is unknown), and a missing prompt count: the engine's at admission (RelayPlan's), else
        its /tokenize's now, so a request cut short, whoever cut it, is billed and counted for its prompt too."""
        usage = dict(outcome.usage)
        prompt, completion, _ = outcome.tokens()
        if prompt is not None and completion is not None and completion >= token_chunks:
            return usage  # the engine's own count covers what was sent
        outcome.usage_estimated = True
        output = "output_tokens" if "input_tokens" in usage and "prompt_tokens" not in usage else "completion_tokens"
        usage[output] = max(completion or 0, token_chunks)  # Anthropic's and Responses' name, or chat's
        counted = plan.prompt_counted  # an engine that cut the stream may count nothing now
        tokenize = tokenize_request(plan.endpoint, plan.request) if prompt is None and counted is None else None
        if tokenize and plan.route.upstreams:
            counted = await context_fit.count_prompt(self.engines, plan.route.upstreams[0], tokenize)
        return usage | ({"prompt_tokens": counted} if prompt is None and counted is not None else {})


class _Tracked:
    """The server's ``send``, noting whether anything was sent (``started``) and adding the header
    ``x-request-id: request_id`` to the response head, the first message, whichever module sends it. A plain
    callable returning the server's awaitable rather than a coroutine of its own: it is called for every relayed
    chunk, which costs one attribute test, as before the header (issue 35: no work per chunk). ``wrapped`` is the
    server's ``send`` (gateway.asgi_io.body_writer)."""

    def __init__(self, send: Send, request_id: str) -> None:
        self.wrapped, self.started, self.request_id = send, False, request_id

    def __call__(self, message: Mapping[str, Any]) -> Awaitable[None]:
        if self.started:
            return self.wrapped(message)
        self.started = True
        if message["type"] == "http.response.start":
            header = (HEADER, self.request_id.encode("ascii"))
            message = {**message, "headers": [*message.get("headers", ()), header]}
        return self.wrapped(message)
