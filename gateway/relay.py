"""One request's trip to the engine and back: ``Relay`` follows its plan (gateway.relay_plan.RelayPlan, fixed before
the first byte) and notes what happens in one small object (gateway.relay_state.RelayState).

A streamed answer goes through gateway.relay_stream (as the engine sends it, keep-alives while it is silent, an
in-stream error when it is cut). Non-streaming answers are read whole first, so an answer the engine cuts short
becomes a 502 and one the engine is silent on for the idle timeout a 504; an error object answered with a 200
(vLLM's flat ``{"object": "error", ...}`` or ``{"error": ...}``) is the engine's error, with the status its ``code``
names (else 502), never a successful answer; a request the engine took is never sent to another replica. What an
engine says in an error answer reaches the client only as gateway.engine_messages leaves it; a redirect, or a whole
answer that is not a JSON object, is a 502. A client that goes away cancels the relay, and with it the engine's
request, at once. A request held for its deployment's wake first (gateway.holding) may have had its stream's head
sent while it waited: the engine's stream continues it, and an answer that cannot (an error the engine answers
whole, a refusal) is raised for gateway.app to end that stream with an in-stream error.
"""

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from console.deployments import engine_checks
from gateway import errors
from gateway.answers import for_request, tally_whole
from gateway.asgi_io import Receive, Send
from gateway.relay_plan import RelayPlan
from gateway.relay_state import RelayState
from gateway.relay_stream import StreamedAnswer
from gateway.rewrite import Translation
from gateway.routing import Router
from gateway.stream_errors import StreamCut, gateway_restarting
from gateway.upstream import Answer, Engines
from gateway.upstream_errors import UpstreamBroken, UpstreamRefused, UpstreamUnreachable
from gateway.whole_answer import error_status, translated

log = logging.getLogger(__name__)
JSON = b"application/json"


class Relay:
    """Relays one request (``plan``) to one of its route's replicas and the answer back to the client."""

    def __init__(self, plan: RelayPlan, engines: Engines, router: Router) -> None:
        self.plan, self.engines, self.router = plan, engines, router
        self.state = RelayState(for_request(plan.endpoint, plan.request), quiet_since=time.monotonic())
        # what must be done before the client sees its answer's end (the key's concurrency slot given back,
        # gateway.ledger.free_slot); never raises; done once, by ``ending``
        self.before_end: Callable[[], Awaitable[None]] | None = None

    async def ending(self) -> None:
        """``before_end``, once: when the answer is complete, before its end goes out; by gateway.app when the
        request ended otherwise (the client left, an error is answered), before its row."""
        before_end, self.before_end = self.before_end, None
        if before_end is not None:
            await before_end()

    async def serve(self, receive: Receive, send: Send, before: Callable[[], Awaitable[None]] | None = None) -> None:
        """``before`` (the wait of a request held for a wake, which may set ``plan``, or in a lane), then ``run``,
        stopped at once when the client disconnects before its answer is complete (the engine's request is aborted
        with its connection). A side task waits for the disconnect, so the relay itself starts without a task
        switch. Cancelled otherwise (uvicorn cancels what is still open HEARTH_DRAIN_SECONDS after a stop), it raises
        errors.gateway_restarting: a held stream whose head went out ends with its error event, never silently (a
        stream being relayed ends with its own, gateway.relay_stream)."""
        relay = asyncio.current_task()
        assert relay is not None  # called from a request's task
        watch = asyncio.ensure_future(self._cancel_when_gone(receive, relay))
        try:
            if before is not None:
                await before()
            await self.run(send)
        except asyncio.CancelledError:
            relay.uncancel()
            if not self.state.client_gone:
                raise gateway_restarting() from None
            log.info("client left; upstream request to %s aborted", self.plan.model)
        finally:
            watch.cancel()

    async def run(self, send: Send) -> None:
        """Try the replicas in the router's order; move on only when one could not be reached at all (a
        refused connection, or one closed before any answer). An engine that took the request and stayed
        silent past the idle timeout is a 504, never a second try elsewhere: it may be running it. When every
        replica's address was refused by the address policy, a 502 says so."""
        plan = self.plan
        tried, refused = 0, 0
        for upstream in self.router.order(plan.route, plan.prefix):
            self.router.started(upstream, plan.prefix)
            tried += 1
            self.state.asked_engine = True
            try:
                try:
                    answer = await self.engines.post(
                        upstream.base_url,
                        plan.engine_path,
                        upstream.engine_api_key,
                        plan.body,
                        plan.hops,
                        upstream.external,
                    )
                except UpstreamUnreachable as exc:
                    self.state.asked_engine = False
                    refused += isinstance(exc, UpstreamRefused)
                    log.warning("replica %s of %s unreachable: %s", upstream.replica_id, plan.model, exc)
                    continue
                except TimeoutError:
                    raise errors.upstream_timeout(plan.model) from None
                await self._answer(answer, send)
            finally:
                self.router.finished(upstream)
            return
        if tried and refused == tried:
            raise errors.upstream_refused(plan.model)
        if tried and plan.route.deployment_id:
            await _ask_check(plan)
        raise errors.upstream_unreachable(plan.model, plan.retry_after)

    async def _answer(self, answer: Answer, send: Send) -> None:
        self.state.status = answer.status
        async with answer:
            if answer.status in (401, 403):  # the engine refused the gateway's own key: not the client's fault
                raise errors.engine_refused(self.plan.model)
            if 300 <= answer.status < 400:
                raise errors.upstream_redirected(self.plan.model, answer.status)
            if answer.mimetype == "text/event-stream" and answer.status < 300:  # an error is read whole
                await self._stream(answer, send)
            else:
                await self._whole(answer, send)

    async def _whole(self, answer: Answer, send: Send) -> None:
        """A whole answer: read to its end, accounted, in the client's API (an error reshaped into the API's
        own whatever the engine called it, a chat answer translated), then sent with its head. On a held stream
        whose head went out, an error is raised for gateway.app to end the stream with."""
        plan = self.plan
        try:
            body = await answer.read()
        except TimeoutError:
            raise errors.upstream_timeout(plan.model) from None
        except UpstreamBroken:
            raise errors.upstream_broke(plan.model) from None
        whole = self._account_whole(body) if answer.status < 400 else None
        failed = answer.status if answer.status >= 400 else error_status(whole)
        if self.state.head_sent:
            raise errors.engine_error(failed, body) if failed else errors.upstream_broke(plan.model)
        if failed and answer.status < 400:
            raise errors.engine_error(failed, body)  # answered in the client's API by gateway.app, and logged so
        content_type = (answer.content_type or "application/json").encode("latin-1")
        if answer.status >= 400:
            error = errors.engine_error(answer.status, body, plan.model, plan.endpoint)
            body, content_type, self.state.error = error.body(plan.surface), JSON, error.message
            self.state.status = error.status  # 502 where the engine failed its own answer (errors.engine_error)
        elif plan.translation != Translation.NONE:
            body, content_type = translated(plan, whole), JSON
        elif whole is None:
            raise errors.upstream_not_json(plan.model)
        head = [(b"content-type", content_type), *plan.head_headers, *(errors.NO_RETRY if answer.status == 508 else ())]
        await self.ending()
        await send({"type": "http.response.start", "status": self.state.status, "headers": head})
        await send({"type": "http.response.body", "body": body})
        self.state.answered = True

    def _account_whole(self, body: bytes) -> dict[str, Any] | None:
        """Usage, finish reason and the tally from a whole answer; the answer, or None when it is not a JSON
        object."""
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(answer, dict):
            return None
        self.state.usage = answer.get("usage") or {}
        self.state.finish_reason = tally_whole(self.state.tally, answer)
        return answer

    async def _stream(self, answer: Answer, send: Send) -> None:
        """A streamed answer, every byte of it sent through ``StreamedAnswer``, in this order: the head; the engine's
        pieces as they arrive, with keep-alives while it is silent; the last bytes, with the in-stream error of
        a stream cut short. A client that left ends it at once (the CancelledError goes on to ``serve``)."""
        stream = StreamedAnswer(
            self.plan, self.state, send, answer, self.ending if self.before_end is not None else None
        )
        await stream.head(answer.status, answer.content_type)
        cut = StreamCut.CLOSED
        try:
            async for raw in answer.chunks(stream.push):
                await stream.pull(raw)
            await stream.pull(b"")  # what the last push left
        except TimeoutError as exc:
            cut = StreamCut.IDLE
            log.warning("stream from %s stalled: %s", self.plan.model, exc)
        except UpstreamBroken as exc:
            log.warning("stream from %s broke: %s", self.plan.model, exc)
        except asyncio.CancelledError:
            if self.state.client_gone:
                raise
            # uvicorn cancels what is still open HEARTH_DRAIN_SECONDS after a stop: the stream ends with its
            # error event rather than a silent cut
            cut = StreamCut.RESTART
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        finally:
            stream.stop()  # what the stream held is noted even when the client left meanwhile
        await stream.end(cut, answer.status)

    async def _cancel_when_gone(self, receive: Receive, relay: asyncio.Task[Any]) -> None:
        while (await receive())["type"] != "http.disconnect":  # uvicorn also says so once the answer is complete
            pass
        if not self.state.answered:
            self.state.client_gone = True
            relay.cancel()


async def _ask_check(plan: RelayPlan) -> None:
    """Ask the worker to look at the engines of ``plan``'s deployment now (console.deployments.engine_checks): none
    could be reached. Redis or the broker away is logged; the client's 503 goes out all the same."""
    try:
        await asyncio.to_thread(engine_checks.ask_check, plan.route.deployment_id)
    except Exception as exc:  # redis' errors, or kombu's when the broker cannot be reached
        log.warning("a check of %s's engines could not be asked for: %s", plan.model, exc)
