"""Requests held for a deployment put aside to share the GPUs (issue 29): a request for a model whose deployment is
asleep, going to sleep, waking or stopped to save, or stopped with the appliance while wanted serving (issue 28;
gateway.snapshot's ``Route.asleep``), waits for its wake (for the last two, its launch again) instead of being
refused, and is then relayed as any other.

- **One wake.** The first request held for a deployment in this process asks the worker for its wake
  (console.deployments.wakeups.request_wake, on a thread: it blocks on Redis and the broker); the others held for
  it meanwhile share that ask, and the ask is made once per deployment across processes (its SET NX). The ask goes
  on whether or not its request stays: a client that leaves calls no wake off.
- **Waiting.** A held request reads the route table again at each reload or announced change of the registry
  (the worker bumps the routing version when the deployment is ready, or failed): it polls nothing of its own, and
  all the requests held for one deployment are served from the same reload, together.
- **The client meanwhile.** A stream gets its 200 once HEARTH_SSE_KEEPALIVE seconds have passed without the wake
  ending, and a keep-alive (the plan's: as for a model thinking before its first token) every HEARTH_SSE_KEEPALIVE
  seconds; a non-streaming request waits silently.
- **Giving up.** After HEARTH_WAKE_TIMEOUT seconds, when the deployment fails (its wake failed: the worker stopped
  its engine and says why) or is stopped meanwhile, when the worker did not wake it after the request came (no room
  could be made for it: it stays put aside, its history says why; seen at the registry's next re-read, within
  RECHECK_EVERY seconds, as no routing changes), or when the wake could not be asked for, the request is
  answered 503 with the reason and a Retry-After (gateway.errors; gateway.app ends a stream whose head went out
  with the in-stream error event of its API instead).

The wait is noted in the request's state (``woke_engine``, ``wake_seconds``: its log row's columns); its TTFT counts
from its arrival, so it includes the wait, as its user felt it. Metrics: held requests by how their hold ended,
the wakes this process asked for, and the seconds held.
"""

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field, replace

from django.conf import settings
from prometheus_client import Counter, Histogram

from console.deployments import wakeups
from console.deployments.wakeups import ADMIN_MUST_ACT, NOT_WOKEN
from gateway import errors
from gateway.asgi_io import Send
from gateway.errors import COMING_STATES
from gateway.registry import Registry
from gateway.relay_plan import RelayPlan
from gateway.relay_state import RelayState
from gateway.relay_stream import SSE_HEADERS
from gateway.snapshot import Route, Snapshot

log = logging.getLogger(__name__)

HELD = Counter(
    "hearth_gateway_held_requests",
    "Requests held for their deployment's wake, by how the hold ended (served, failed, timeout, cancelled)",
    ["model", "outcome"],
)
WAKES_ASKED = Counter(
    "hearth_gateway_wakes_asked", "Wakes the gateway asked the worker for (one however many requests wait)", ["model"]
)
HELD_SECONDS = Histogram(
    "hearth_gateway_held_seconds",
    "How long a request waited for its deployment's wake",
    ["model"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600),
)


@dataclass
class _Ask:
    """The wake this process asked for one deployment: its ask on its way (its result: None once asked, or why it
    could not be), and how many requests wait on it."""

    task: "asyncio.Task[str | None]"
    holders: int = 0


@dataclass
class Holding:
    """The requests this gateway process holds for wakes (module docstring), on its ``registry``."""

    registry: Registry
    _asks: dict[int, _Ask] = field(default_factory=dict)
    _asking: set["asyncio.Task[str | None]"] = field(default_factory=set)  # asks on their way, kept referenced

    async def hold(self, plan: RelayPlan, state: RelayState, send: Send) -> Route:
        """Wait until ``plan``'s deployment (put aside) has a ready route, and return it; the wait is noted in
        ``state``, and a stream's client is kept waiting with its head and keep-alives (``send``). Raises
        GatewayError 503 (module docstring), 404 when the deployment is deleted meanwhile."""
        route, began, since = plan.route, time.monotonic(), time.time()
        state.woke_engine = True
        ask = self._ask(route)
        keeper = KeepAlive(plan, state, send) if plan.stream else None
        outcome = "failed"
        try:
            ready = await self._until_ready(plan, ask, began + settings.HEARTH_WAKE_TIMEOUT, since)
            outcome = "served"
            return ready
        except errors.GatewayError as exc:
            outcome = "timeout" if exc.code == "wake_timeout" else "failed"
            raise
        except asyncio.CancelledError:  # the client left
            outcome = "cancelled"
            raise
        finally:
            state.wake_seconds = time.monotonic() - began
            if keeper is not None:
                await keeper.stop(outcome != "cancelled")
            self._release(route.deployment_id)
            HELD.labels(route.served_model_name, outcome).inc()
            HELD_SECONDS.labels(route.served_model_name).observe(state.wake_seconds)

    async def _until_ready(
        self, plan: RelayPlan, ask: "asyncio.Task[str | None]", deadline: float, since: float
    ) -> Route:
        name = plan.model
        while True:
            generation = self.registry.generation
            ready = _ready(await self.registry.current(), name, plan.retry_after, since)
            if ready is not None:
                return ready
            if ask.done() and (why := ask.result()) is not None:
                raise errors.wake_not_asked(name, why, plan.retry_after)
            left = deadline - time.monotonic()
            if left <= 0:
                raise errors.wake_timeout(name, settings.HEARTH_WAKE_TIMEOUT, plan.retry_after)
            await self.registry.changed_since(generation, left)

    def _ask(self, route: Route) -> "asyncio.Task[str | None]":
        """The wake asked for ``route``'s deployment: the one on its way or done for the requests held now, or a
        new ask (also after one that failed)."""
        ask = self._asks.get(route.deployment_id)
        if ask is None or (ask.task.done() and ask.task.result() is not None):
            task = asyncio.ensure_future(_ask_for_wake(route))
            self._asking.add(task)
            task.add_done_callback(self._asking.discard)
            ask = self._asks[route.deployment_id] = _Ask(task, ask.holders if ask else 0)
        ask.holders += 1
        return ask.task

    def _release(self, deployment_id: int) -> None:
        """A request held for ``deployment_id`` stops waiting; with the last one, the next request asks again."""
        ask = self._asks.get(deployment_id)
        if ask is not None:
            ask.holders -= 1
            if ask.holders <= 0:
                del self._asks[deployment_id]


async def _ask_for_wake(route: Route) -> str | None:
    """Ask the worker to wake ``route``'s deployment (once: wakeups' SET NX); None once asked (by this call or an
    earlier one), else why it could not be (logged)."""
    try:
        sent = await asyncio.to_thread(wakeups.request_wake, route.deployment_id, "A request came for it.")
    except Exception as exc:  # redis' errors, or kombu's when the broker cannot be reached
        log.warning("the wake of %s could not be asked for: %s", route.served_model_name, exc)
        return f"{type(exc).__name__}: {exc}"[:200]
    if sent:
        WAKES_ASKED.labels(route.served_model_name).inc()
        log.info("wake of %s asked for: a request came for it", route.served_model_name)
    return None


WAKE_HEADER = b"x-hearth-wake-seconds"


def woken_plan(planned: RelayPlan, held: RelayPlan, state: RelayState) -> RelayPlan:
    """The plan made again on the ready route once woken (``planned``), with the held one's batch id and rate-limit
    headers, and WAKE_HEADER: how long the request was held for the wake, in seconds, where its head has not gone
    out yet (a whole answer; a stream's goes out with the keep-alives, before the wake ends). A trial's client
    waited 102 s for a 200 that said nothing of why."""
    waited = (WAKE_HEADER, f"{state.wake_seconds or 0.0:.1f}".encode())
    return replace(planned, batch_id=held.batch_id, ratelimits=held.ratelimits, headers=(*planned.headers, waited))


def _ready(snapshot: Snapshot, name: str, retry_after: int, since: float) -> Route | None:
    """``name``'s ready route; None while it may still come (put aside, or being relaunched). Raises GatewayError:
    503 when its deployment failed (its reason), was not woken since ``since`` (Unix s: no room, its reason) or
    was stopped meanwhile, 404 when it is gone."""
    route = snapshot.routes.get(name)
    if route is not None:
        return route
    state = snapshot.states.get(name)
    if name in snapshot.asleep:
        at, why = snapshot.not_woken.get(name, (0.0, ""))
        if at >= since:  # the worker's "Not woken: ..." (console.deployments.room_actions)
            why = why.removeprefix(NOT_WOKEN)
            if why.endswith(ADMIN_MUST_ACT):
                raise errors.wake_blocked(name, why.removesuffix(ADMIN_MUST_ACT))
            raise errors.wake_failed(name, why, retry_after)
        return None
    if state in COMING_STATES:
        return None
    if state is None:
        raise errors.unknown_model(name)
    if state == "failed":
        raise errors.wake_failed(name, snapshot.reasons.get(name, ""), None)
    raise errors.not_ready(name, state, retry_after, snapshot.reasons.get(name, ""))


class KeepAlive:
    """A held stream's head, once its plan's keep-alive interval has passed, then a keep-alive each interval; each
    sent from a timer's task, one at a time. Also what gateway.lanes keeps a stream held for room alive with."""

    def __init__(self, plan: RelayPlan, state: RelayState, send: Send) -> None:
        self.plan, self.state, self.send = plan, state, send
        self.sending: asyncio.Future[None] | None = None
        self.timer = asyncio.get_running_loop().call_later(plan.keepalive_every, self._tick)

    def _tick(self) -> None:
        if self.sending is None or self.sending.done():
            self.sending = asyncio.ensure_future(self._send())
        self.timer = asyncio.get_running_loop().call_later(self.plan.keepalive_every, self._tick)

    async def _send(self) -> None:
        state = self.state
        if not state.head_sent:
            # the status its answer began with, logged if its client leaves before the engine's answer (which
            # replaces it: an engine's error after this head is logged with its own status)
            state.head_sent, state.status = True, 200
            head = [(b"content-type", b"text/event-stream"), *SSE_HEADERS, *self.plan.head_headers]
            await self.send({"type": "http.response.start", "status": 200, "headers": head})
        await self.send({"type": "http.response.body", "body": self.plan.keepalive, "more_body": True})
        state.quiet_since = time.monotonic()

    async def stop(self, finish: bool) -> None:
        """No more keep-alives; the one being sent finished first when the stream goes on (``finish``), else
        dropped."""
        self.timer.cancel()
        if self.sending is None:
            return
        if not finish:
            self.sending.cancel()
            return
        with contextlib.suppress(Exception):  # a client gone meanwhile: its relay finds out
            await self.sending
