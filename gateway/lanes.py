"""Priority lanes (issue 30): while a deployment is saturated, requests of the lower classes wait in the gateway
instead of piling onto the engine, and go on as it drains.

- **Classes.** A request runs at its plan's ``priority`` (its key's class, or "batch" for a Batch API line):
  *interactive* is never held; *standard* is held while the deployment is saturated, or while another standard
  request is held in any process (a check's newer requests went on in one process while older ones waited in the
  other); *batch* too, and behind every held standard request (it goes only when no standard request waits, in
  this process or another: each reading also reads the other processes' held requests from the queue depth below;
  a trial's two relay processes sent 7 of 7 batch lines on while the other's standard requests waited).
- **Saturated** means, at the latest reading of the deployment's replicas (gateway.engine_load, every READ_EVERY
  seconds while the deployment has traffic in this process, one reading shared by all its requests): KV-cache use
  over HEARTH_LANE_KV_THRESHOLD (0.9 by default; the mean over replicas), or requests waiting in the engines (plus
  those this process sent on since the reading, less those it saw end since), or, once a capacity is known, the
  engines' requests (running plus waiting, with the same correction, and never fewer than this process has sent on
  and not seen end: a reading may be older than they are) at that capacity less a headroom kept for
  interactive requests (1/HEADROOM_SHARE of it, and at least one request from a capacity of two: an interactive
  request sent into an engine's queue waits behind everything in it, a trial's 20–44 s behind batch work). The room
  a reading leaves is shared between the processes holding requests for the deployment (this one and those the
  queue depth says hold requests the room could take): each sends on at most its share until the next reading
  (the room ÷ their number, the remainder to each in turn, a second at a time), and a request of its own that
  ends is no more room until a reading says so, so two processes do not both fill the last place kept for
  interactive requests (a trial's interactive request waited 5.9 s in the engine's queue). A
  replica's capacity is its ``max_num_seqs`` where Hearth launched it with one (``Route.max_num_seqs``), lowered to
  what it learned where that is less. It is learned per replica: the most requests it ran at a
  reading that had requests waiting in it, as the reading before did too (a queue that lasted, its ``max_num_seqs``
  or what its KV cache held, not a request waiting for the next engine step); it is used only from HEADROOM_SHARE
  requests up (below that the headroom would be none) and forgotten CAPACITY_TTL seconds after it was last seen, so
  a capacity learned at a bad moment does not cap the engine for good (the engine then fills to a queue again, which
  teaches it anew). Until a capacity is known, the requests sent on between two readings are at most as many as
  the engines ran at the first (SLOW_START at least): the load doubles each reading rather than all at once. With no
  fresh reading (the deployment's first request in a while) the first request goes on and the others wait for the
  reading it starts. Counting the requests this process sent on and saw end between readings releases one held
  request for each that ends, as the engine drains, without waiting for the next reading. A reading older than
  STALE_AFTER seconds (replicas that do not answer, or an endpoint Hearth did not launch, which is not read) holds
  nothing.
- **Fairness within a class.** Held requests of one class go in weighted-fair order of tokens between keys
  (gateway.fair_queue), each costing its reservation (gateway.relay_plan's ``reserve``) or, for a key without token
  limits, the same estimate (its prompt at ~4 bytes a token plus the most it may generate, gateway.quotas): one
  key's 200 concurrent requests do not starve another key's one.
- **The client meanwhile.** A held stream gets its 200 and keep-alives as one held for a wake does
  (gateway.holding.KeepAlive); a client that leaves leaves the queue. After HEARTH_LANE_HOLD_TIMEOUT seconds a held
  request is answered 429 with Retry-After in its API's shape (gateway.app ends a stream whose head went out with
  its API's in-stream error event instead).
- **Off.** HEARTH_LANES=off holds nothing (the bench's comparison); nothing is read either.
- **The engine's own queue.** Where the deployment's engine was launched to order its queue by request priority
  (``Route.priority_scheduling``: an admin's extra flags, console.deployments.engine_flags.schedules_by_priority),
  the class also goes to the engine as the body's ``priority`` (ENGINE_PRIORITY), lanes on or off.

Queue depth (gateway.lane_depth): each process writes its held requests per class to Redis, at each reading when
they changed and every PUBLISH_EVERY seconds while busy, for the console and for the other processes. Metrics:
``hearth_gateway_lane_waiting{model,priority}`` (held now), held requests by how their hold ended
(``hearth_gateway_lane_holds_total{model,priority,outcome}``: served, timeout, cancelled) and the seconds held.
"""

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import redis.asyncio as aioredis
from django.conf import settings
from prometheus_client import Counter, Gauge, Histogram

from gateway import count_tokens, lane_depth, quotas
from gateway.asgi_io import Send
from gateway.engine_load import Load, LoadReader
from gateway.errors import GatewayError
from gateway.fair_queue import FairQueue
from gateway.holding import KeepAlive
from gateway.relay import Relay
from gateway.relay_plan import RelayPlan
from gateway.rewrite import with_fields
from gateway.snapshot import Route
from gateway.upstream import Engines

log = logging.getLogger(__name__)

INTERACTIVE, STANDARD, BATCH = "interactive", "standard", "batch"
HELD_CLASSES = (STANDARD, BATCH)  # in the order they are released
# The engine's ``priority`` per class, lower first (vLLM; SGLang with --schedule-low-priority-values-first), 10 apart:
# SGLang preempts a running request only for one more than --priority-scheduling-preemption-threshold (10) ahead
# (sglang/srt/managers/schedule_policy.py, 0.5.15.post1), so interactive preempts batch there, not standard.
ENGINE_PRIORITY = {INTERACTIVE: 0, STANDARD: 10, BATCH: 20}
# The engine endpoints whose body takes ``priority`` (vLLM 0.32.0's and SGLang 0.5.15's OpenAI protocol classes).
PRIORITY_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"})
READ_EVERY = 0.25  # seconds between readings of a busy deployment's replicas
STALE_AFTER = 2.0  # seconds after which a reading holds nothing
HEADROOM_SHARE = 16  # 1/16 of a learned capacity (rounded down) is kept for interactive requests
CAPACITY_TTL = 60.0  # seconds a learned capacity is used after the queue that taught it
SLOW_START = 4  # requests sent on between two readings at least, while no capacity is known
RETRY_AFTER = 30  # seconds a request that waited too long is told to wait before it retries
BYTES_PER_TOKEN = 4  # a prompt's tokens estimated from its body, for a key without token limits
PUBLISH_EVERY = 2.0  # seconds between writes of an unchanged queue depth while busy
ROTATE_EVERY = 1.0  # seconds each turn at the remainder of the room shared between processes lasts

WAITING = Gauge("hearth_gateway_lane_waiting", "Requests held in a priority lane now", ["model", "priority"])
HOLDS = Counter(
    "hearth_gateway_lane_holds",
    "Requests held in a priority lane, by how the hold ended (served, timeout, cancelled)",
    ["model", "priority", "outcome"],
)
HELD_SECONDS = Histogram(
    "hearth_gateway_lane_held_seconds",
    "How long a request waited in a priority lane",
    ["model", "priority"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300),
)


def lane_timeout(model: str, priority: str, seconds: float) -> GatewayError:
    """429 for a request held longer than HEARTH_LANE_HOLD_TIMEOUT: OpenAI's rate_limit_error (Anthropic's by its
    status), with a Retry-After."""
    return GatewayError(
        429,
        f"The deployment serving '{model}' stayed saturated: this {priority}-class request waited {seconds:g} s "
        f"for room and got none; retry in {RETRY_AFTER} s.",
        type="rate_limit_error",
        code="lane_hold_timeout",
        retry_after=RETRY_AFTER,
    )


def token_cost(plan: RelayPlan) -> int:
    """The tokens ``plan`` may take (module docstring): its reservation, else the same estimate from its body."""
    if plan.reserve:
        return plan.reserve
    prompt = len(plan.body) // BYTES_PER_TOKEN
    return quotas.tokens_to_reserve(plan.endpoint, plan.request, prompt, plan.route.max_model_len)


def with_engine_priority(plan: RelayPlan) -> RelayPlan:
    """``plan`` with its class in the engine body's ``priority`` (ENGINE_PRIORITY) when its route's engine orders its
    queue by it (``Route.priority_scheduling``) and the engine's endpoint reads it (PRIORITY_PATHS: vLLM's
    Anthropic /v1/messages has no such field); any ``priority`` the client sent is replaced: a client does not pick
    its own place in the queue."""
    if not plan.route.priority_scheduling or plan.engine_path not in PRIORITY_PATHS:
        return plan
    value = ENGINE_PRIORITY.get(plan.priority, ENGINE_PRIORITY[STANDARD])
    engine = json.loads(plan.body) if b'"priority"' in plan.body else {}  # else appended to the text as it is
    return replace(plan, body=with_fields(plan.body, engine, {"priority": value}))


def headroom(capacity: int) -> int:
    """The requests of ``capacity`` kept for interactive ones (module docstring)."""
    return max(capacity // HEADROOM_SHARE, 1) if capacity >= 2 else 0


@dataclass(frozen=True)
class Reading:
    """A deployment's replicas as last read: requests running and waiting (all replicas), mean KV-cache use (None
    when no replica exposes it), the learned capacity (None while a replica has none), at ``at`` (monotonic s)."""

    running: int
    waiting: int
    kv_usage: float | None
    capacity: int | None
    at: float


class Ticket:
    """One request's pass through its deployment's lane: ``before`` (the wait for its wake, if any, then for room)
    for gateway.relay, and ``done`` once it ended, however it ended."""

    def __init__(self, lane: "Lane | None", relay: Relay, send: Send, wake: Callable[[], Awaitable[None]] | None):
        self.lane, self.relay, self.send, self.wake = lane, relay, send, wake
        self.admitted = False

    @property
    def before(self) -> Callable[[], Awaitable[None]] | None:
        if self.lane is None and not self.relay.plan.route.priority_scheduling and not self.relay.plan.route.asleep:
            return self.wake
        return self._before

    async def _before(self) -> None:
        if self.wake is not None:
            await self.wake()
        self.relay.plan = with_engine_priority(self.relay.plan)
        if self.lane is not None:
            await self.lane.admit(self)

    def done(self) -> None:
        if self.lane is not None and self.admitted:
            self.lane.leave()


class Lane:
    """One deployment's lanes in this process: its held requests by class, its latest reading, the requests it
    sent on that have not ended."""

    def __init__(self, lanes: "Lanes", deployment_id: int, route: Route) -> None:
        self.lanes, self.deployment_id, self.route = lanes, deployment_id, route
        self.queues: dict[str, FairQueue[tuple[asyncio.Future[None], Ticket]]] = {c: FairQueue() for c in HELD_CLASSES}
        self.in_flight = 0  # requests sent on and not ended
        self.admitted_since = self.ended_since = 0  # since the reading began
        self.capacity: dict[int, tuple[int, float]] = {}  # replica id → learned capacity, when last seen (monotonic)
        self.queued: set[int] = set()  # replicas whose last reading had requests waiting
        self.reading: Reading | None = None
        self.unreadable = False  # the last reading got no replica's load: nothing is held until one answers
        self.watcher: asyncio.Task[None] | None = None
        self.published: tuple[dict[str, int], float] | None = None
        self.standard_elsewhere = 0  # standard requests other processes hold, at the last reading
        self.holders: list[str] = []  # the other processes that can use room, at the last reading (``_read_elsewhere``)

    @property
    def held(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def saturated(self) -> bool:
        """Whether a standard or batch request must wait now (module docstring)."""
        r = self.reading
        if r is None or time.monotonic() - r.at > STALE_AFTER:
            return self.watcher is not None and not self.unreadable  # a first reading is on its way: wait for it
        if r.kv_usage is not None and r.kv_usage > settings.HEARTH_LANE_KV_THRESHOLD:
            return True
        sent_on = self.admitted_since - self.ended_since
        if r.waiting > 0 and r.waiting + sent_on > 0:
            return True
        if r.capacity is None:  # slow start: at most as many again as the engines have, until the next reading
            return sent_on >= max(SLOW_START, r.running)
        # this process's own requests sent on are in the engine whatever a reading taken before they reached its
        # metrics says (a trial's first burst filled all 4 places with batch work, none kept for interactive)
        limit = r.capacity - headroom(r.capacity)
        occupied = max(r.running + r.waiting + sent_on, self.in_flight)
        if occupied >= limit:
            return True
        # with other processes holding requests, this one sends on its share of the room the reading left; its own
        # requests that ended since are no more room until a reading says so: the others' next readings see those
        # places free too (a check's two processes filled the interactive place in 65 % of its samples)
        return bool(self.holders) and self.admitted_since >= self._share(limit - r.running - r.waiting)

    def _share(self, room: int) -> int:
        """Of ``room`` places a reading left, those this process may fill before the next (module docstring): an
        equal share, the remainder to the processes whose turn it is, the turn moving every ROTATE_EVERY seconds (a
        check's process second by name waited 42–51 s while the first's newer requests went on at once)."""
        if not self.holders:
            return room
        holders = sorted({*self.holders, self.lanes.process})
        rank = (holders.index(self.lanes.process) + int(time.time() / ROTATE_EVERY)) % len(holders)
        return room // len(holders) + (1 if rank < room % len(holders) else 0)

    def must_wait(self, priority: str) -> bool:
        if priority == INTERACTIVE:
            return False
        ahead = (
            len(self.queues[STANDARD]) + self.standard_elsewhere + (len(self.queues[BATCH]) if priority == BATCH else 0)
        )
        return ahead > 0 or self.saturated()

    async def admit(self, ticket: Ticket) -> None:
        """Return once ``ticket``'s request may go on to the engine, held meanwhile while it must wait. Raises
        GatewayError 429 after HEARTH_LANE_HOLD_TIMEOUT seconds held."""
        plan, state = ticket.relay.plan, ticket.relay.state
        self.route = plan.route  # the replicas to read: the route it was planned on (again after a wake)
        priority = plan.priority if plan.priority in (INTERACTIVE, *HELD_CLASSES) else STANDARD
        if not self.must_wait(priority):
            self._admit(ticket)
            self._watch()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = self.queues[priority].push(plan.key.id, token_cost(plan), (future, ticket))
        WAITING.labels(plan.model, priority).inc()
        self._watch()
        keeper = KeepAlive(plan, state, ticket.send) if plan.stream else None
        began, outcome = time.monotonic(), "cancelled"
        try:
            async with asyncio.timeout(settings.HEARTH_LANE_HOLD_TIMEOUT):
                await future
            outcome = "served"
        except TimeoutError:
            if not ticket.admitted:
                outcome = "timeout"
                raise lane_timeout(plan.model, priority, settings.HEARTH_LANE_HOLD_TIMEOUT) from None
            outcome = "served"  # released as the timeout struck: it goes on
        finally:
            if not ticket.admitted:
                self.queues[priority].remove(entry)
            WAITING.labels(plan.model, priority).dec()
            HOLDS.labels(plan.model, priority, outcome).inc()
            HELD_SECONDS.labels(plan.model, priority).observe(time.monotonic() - began)
            if keeper is not None:
                await keeper.stop(outcome != "cancelled")

    def leave(self) -> None:
        """A request sent on ended: room for the next held one."""
        self.in_flight -= 1
        self.ended_since += 1
        self._release()

    def _admit(self, ticket: Ticket) -> None:
        ticket.admitted = True
        self.in_flight += 1
        self.admitted_since += 1

    def _release(self) -> None:
        """Send on held requests, standard before batch, each class in its fair order, while there is room."""
        while self.held and not self.saturated():
            if not len(self.queues[STANDARD]) and self.standard_elsewhere:
                break  # batch goes only when no standard request waits, here or in another process
            queue = self.queues[STANDARD] if len(self.queues[STANDARD]) else self.queues[BATCH]
            item = queue.pop()
            if item is None:
                break
            future, ticket = item
            if not future.done():
                self._admit(ticket)
                future.set_result(None)

    def _watch(self) -> None:
        """Read the replicas while the deployment has traffic here (one task for all its requests)."""
        if self.watcher is None:
            self.watcher = asyncio.ensure_future(self._read_while_busy())

    async def _read_while_busy(self) -> None:
        try:
            while self.in_flight > 0 or self.held:
                await self._read_elsewhere()  # first: ends meanwhile are not taken as in the reading
                admitted, ended = self.admitted_since, self.ended_since
                loads = await self.lanes.reader.read(self.route.upstreams)
                self.admitted_since -= admitted  # those sent on while it was read may be in it or not: counted
                self.ended_since -= ended
                self.unreadable = not loads
                if loads:
                    self.reading = self._reading(loads)
                self._release()
                await self._publish()
                await asyncio.sleep(READ_EVERY)
        except Exception:  # a bug must not leave requests held forever: they are released at their timeout
            log.exception("the lanes of deployment %s stopped reading its replicas", self.deployment_id)
        finally:
            self.watcher = None
            await self._publish(gone=True)

    def _reading(self, loads: dict[int, Load]) -> Reading:
        now = time.monotonic()
        for replica, load in loads.items():
            if load.waiting > 0 and replica in self.queued:  # a queue that lasted a reading: at capacity
                before, seen = self.capacity.get(replica, (0, -CAPACITY_TTL))
                self.capacity[replica] = (max(before if now - seen < CAPACITY_TTL else 0, load.running), now)
            self.queued = (self.queued | {replica}) if load.waiting > 0 else (self.queued - {replica})
        kvs = [load.kv_usage for load in loads.values() if load.kv_usage is not None]
        learned = [self.capacity.get(replica, (0, -CAPACITY_TTL)) for replica in loads]
        live = [c if now - at < CAPACITY_TTL and c >= HEADROOM_SHARE else 0 for c, at in learned]
        launched = self.route.max_num_seqs
        each = [min(c, launched) if c and launched else c or launched for c in live]
        return Reading(
            running=sum(load.running for load in loads.values()),
            waiting=sum(load.waiting for load in loads.values()),
            kv_usage=sum(kvs) / len(kvs) if kvs else None,
            capacity=sum(each) if all(each) else None,
            at=now,
        )

    async def _read_elsewhere(self) -> None:
        """The other processes' held requests for this deployment (gateway.lane_depth), and those of them that can
        use room: holding standard requests, or batch ones while no standard request waits anywhere (a process
        holding only batch work behind another's standard requests took a share it could not use)."""
        elsewhere = await lane_depth.elsewhere(self.lanes.redis, self.deployment_id, self.lanes.process)
        waiting = elsewhere.standard + len(self.queues[STANDARD])
        self.standard_elsewhere = elsewhere.standard
        self.holders = [p for p, (standard, batch) in elsewhere.held.items() if standard or (batch and not waiting)]

    async def _publish(self, gone: bool = False) -> None:
        """This process's held requests per class in Redis, when they changed or every PUBLISH_EVERY seconds; the
        field deleted when ``gone`` (gateway.lane_depth)."""
        counts = {c: len(q) for c, q in self.queues.items()}
        now = time.monotonic()
        if not gone and self.published and self.published[0] == counts and now - self.published[1] < PUBLISH_EVERY:
            return
        if await lane_depth.publish(self.lanes.redis, self.deployment_id, self.lanes.process, None if gone else counts):
            self.published = None if gone else (counts, now)


class Lanes:
    """The lanes of every deployment this process relays to, on the gateway's Redis client (for queue depth)."""

    def __init__(self, redis: aioredis.Redis, engines: Engines, process: str = lane_depth.PROCESS) -> None:
        self.redis, self.reader, self.process = redis, LoadReader(engines), process  # process: its queue depth field
        self._lanes: dict[int, Lane] = {}

    def ticket(self, relay: Relay, send: Send, wake: Callable[[], Awaitable[None]] | None = None) -> Ticket:
        """``relay``'s pass (a plain one when HEARTH_LANES is off, or for a count_tokens request, which the
        engine only counts); ``send`` keeps a held stream's client waiting; ``wake`` is awaited first."""
        plan = relay.plan
        if not settings.HEARTH_LANES or plan.endpoint == count_tokens.COUNT_TOKENS_PATH:
            return Ticket(None, relay, send, wake)
        deployment = plan.route.deployment_id
        lane = self._lanes.get(deployment)
        if lane is None:
            lane = self._lanes[deployment] = Lane(self, deployment, plan.route)
        return Ticket(lane, relay, send, wake)

    async def close(self) -> None:
        for lane in self._lanes.values():
            if lane.watcher is not None:
                lane.watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lane.watcher
