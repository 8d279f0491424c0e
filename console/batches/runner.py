"""The batch runner: every running batch of this appliance (its HEARTH_INSTANCE) run by one Celery task, their
pending lines sent through the gateway's own /v1 endpoint, HEARTH_BATCH_CONCURRENCY at once across them all (shared
evenly among the batches with lines to send), each as its owner key at the batch class (console.batches.credential),
until every line is answered, the batch is cancelled or it expires; then its output and error files are written
(console.batches.batches.finish). One task for them all: batches take one of the worker's task slots however many
run, and a batch waiting for a deployment asleep holds up no other.

Exactly once, across restarts:
- One runner per appliance: a lease in Redis (``batch-runner``, LEASE_SECONDS, renewed each tick). A task that finds
  it held leaves; beat's sweep (console.batches.tasks) sends the task when a batch runs and no runner holds the lease
  (its worker died), and a worker's start sweeps too; a new batch sends it at once.
- A line is answered once in the database: its answer and the batch's request_counts are written in one transaction,
  only while the line is pending (batches.record); a resumed runner sends only pending lines, so none is skipped.
- A line is sent to the engine once: the gateway keeps a line's relay going when the runner goes away, stores the
  answer in Redis (gateway.batch_lines) and answers the same line's next request with it, without the engine. The
  runner deletes that answer once its own is stored. Not covered: the gateway's process dying with a line in flight
  (the line is sent again when its in-flight mark lapses, a minute later).
- Not answered, sent again after a while: 429 (limits, lanes) and 503 (a deployment starting, or put to sleep after
  the tick's read while HEARTH_BATCH_WAKES_DEPLOYMENTS is off) hold back every line of that model, BACKOFF_FIRST
  seconds doubling up to BACKOFF_MOST (or the Retry-After when longer), until one is answered or its deployment's
  state changes; 409 (the line in flight from before a restart) and no answer at all (the gateway down) send that line
  again after RETRY_SECONDS.
- A line whose model's deployment is not ready and will not be by a request (stopped, failed, never launched,
  launching) is not sent: the deployments' states are read once a tick for the batch's models. A deployment asleep,
  or stopped by its idle policy, is sent to only when HEARTH_BATCH_WAKES_DEPLOYMENTS says batches wake deployments
  (the gateway wakes it; were it off, the gateway would answer 503 deployment_asleep). The batch's
  ``waiting_reason`` says which deployment it waits for.
- Cancel, and the end of the completion window: no new line is sent; the lines in flight are waited for up to
  STOP_GRACE seconds and their answers kept (with any answer the gateway kept for a line of an earlier runner), and
  those still out then are recorded as error lines (``batch_cancelled``, ``batch_expired``); at an expiry every line
  never answered is an error line ``batch_expired`` too, as OpenAI's are (console.batches.file_lines), so that the
  files hold every line; then the batch ends cancelled or expired. A cancel during an expiry's wait ends it cancelled.
"""

import asyncio
import logging
import secrets
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

import httpx
import redis
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.utils import timezone

from appliance.redis_keys import redis_key
from console.batches import batches
from console.batches.credential import LineCredential, answer_key, sign
from console.batches.file_lines import STOP_GRACE, Line, answer_line, cancelled_in_flight, expired, kept_answer
from console.batches.models import ENDED, RUNNING, Batch, BatchLine, LineState, Status
from console.deployments.models import Deployment, DeploymentState, DesiredState

log = logging.getLogger(__name__)
LEASE_SECONDS = 15  # the runner's lease outlives its last renewal (every tick) this long
TICK = 0.5  # seconds between looks at the batch's status (cancel, expiry)
RETRY_SECONDS = 5.0  # seconds before a line not answered is sent again when no Retry-After says
SEEN_EVERY = 5.0  # seconds between the runner's notes that it runs (Batch.runner_seen_at)
RETRIED = {409, 429, 503}
HELD_BACK = {429, 503}  # answers that hold back every line of the model (its deployment or its limits)
BACKOFF_FIRST, BACKOFF_MOST = 5.0, 300.0  # seconds a model's lines are held back after a 429/503, doubling
SENT = {DeploymentState.READY, DeploymentState.ASLEEP, DeploymentState.SLEEPING, DeploymentState.WAKING}


def lease_key() -> str:
    """``hearth:<instance>:batch-runner``: held by the running runner (a random token), LEASE_SECONDS at a time."""
    return redis_key("batch-runner")


def _pending(batch: Batch) -> list[Line]:
    rows = batch.lines.filter(state=LineState.PENDING).order_by("index")
    return [
        Line(pk, LineCredential(batch.public_id, index, batch.key_id), custom_id, url, str(model))
        for pk, index, custom_id, url, model in rows.values_list("pk", "index", "custom_id", "url", "body__model")
    ]


@dataclass(frozen=True, slots=True)
class Served:
    """The deployment serving a model, as the runner reads it: its name, state and desired state."""

    name: str
    state: str
    desired: str

    @property
    def held(self) -> bool:
        """Whether lines for it are not sent, and the batch waits for it: not ready, and no line would bring it
        back (asleep, waking or stopped by its idle policy are sent to only when HEARTH_BATCH_WAKES_DEPLOYMENTS
        says batches wake deployments: otherwise each line would be a 503 in the request log, which a trial saw
        trip the error-rate alert)."""
        if self.state == DeploymentState.READY:
            return False
        if not settings.HEARTH_BATCH_WAKES_DEPLOYMENTS:
            return True
        return self.state not in SENT and self.desired != DesiredState.STOPPED_IDLE

    @property
    def waiting_words(self) -> str:
        """What a batch held for it waits for, and, where a request would bring it back but a batch line may not,
        how to end the wait (a trial's batch sat "in progress" for a model asleep, nothing saying it never would
        wake it)."""
        words = f"deployment {self.name} is {self.state}"
        comes_back = self.state in SENT or self.desired == DesiredState.STOPPED_IDLE
        if comes_back and not settings.HEARTH_BATCH_WAKES_DEPLOYMENTS:
            words += (
                ": batches do not wake it (HEARTH_BATCH_WAKES_DEPLOYMENTS is off); the lines go once a request or an "
                "admin wakes it"
            )
        return words


def served(models: list[str]) -> dict[str, Served]:
    """Model name → the deployment serving it, for those of ``models`` a deployment serves (one query)."""
    rows = Deployment.objects.filter(served_model_name__in=models)
    return {m: Served(n, s, d) for m, n, s, d in rows.values_list("served_model_name", "name", "state", "desired")}


async def run() -> None:
    """Run this appliance's running batches until none is left, unless another runner holds the lease."""
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    token = secrets.token_hex(8).encode()
    try:
        if await client.set(lease_key(), token, nx=True, ex=LEASE_SECONDS):
            try:
                await _run_all(client, token)
            finally:
                if await client.get(lease_key()) == token:
                    await client.delete(lease_key())
    finally:
        await client.aclose()
        await sync_to_async(connections.close_all)()


def running() -> list[int]:
    """The ids of this appliance's batches still running (oldest first)."""
    mine = Batch.objects.filter(status__in=RUNNING, instance=settings.HEARTH_INSTANCE)
    return list(mine.order_by("pk").values_list("pk", flat=True))


class _Slots:
    """The lines in flight across every batch, HEARTH_BATCH_CONCURRENCY at most, shared evenly among the batches
    with lines to send (``wanting``)."""

    def __init__(self, size: int) -> None:
        self.size, self.free = size, size
        self.wanting: dict[int, bool] = {}

    def share(self) -> int:
        return max(1, -(-self.size // max(1, sum(self.wanting.values()))))


async def _run_all(client: aioredis.Redis, token: bytes) -> None:
    """A _Runner for each running batch, new ones picked up each tick, while the lease is this runner's."""
    slots = _Slots(max(1, settings.HEARTH_BATCH_CONCURRENCY))
    runners: dict[int, asyncio.Task[None]] = {}
    failed_until: dict[int, float] = {}  # a batch whose runner raised is started again after RETRY_SECONDS
    timeout = httpx.Timeout(settings.HEARTH_STREAM_IDLE_TIMEOUT + 60, connect=10)
    async with httpx.AsyncClient(base_url=settings.HEARTH_GATEWAY_URL, timeout=timeout) as http:
        try:
            while await client.get(lease_key()) == token:  # else it lapsed and another took it: leave it the work
                await client.expire(lease_key(), LEASE_SECONDS)
                for pk, task in list(runners.items()):
                    if task.done():
                        del runners[pk]
                        slots.wanting.pop(pk, None)
                        if not task.cancelled() and task.exception() is not None:
                            log.error("batch %s's runner failed", pk, exc_info=task.exception())
                            failed_until[pk] = time.monotonic() + RETRY_SECONDS
                for pk in await sync_to_async(running)():
                    if pk not in runners and failed_until.get(pk, 0) <= time.monotonic():
                        runners[pk] = asyncio.ensure_future(_Runner(pk, client, http, slots).run())
                if not runners:
                    return
                await asyncio.sleep(TICK)
        finally:
            for task in runners.values():
                task.cancel()
            await asyncio.gather(*runners.values(), return_exceptions=True)


class _Runner:
    """One batch's lines until it ends, within the shared slots."""

    def __init__(self, batch_pk: int, client: aioredis.Redis, http: httpx.AsyncClient, slots: _Slots) -> None:
        self.pk, self.redis, self.http, self.slots = batch_pk, client, http, slots
        self.waiting: list[tuple[float, Line]] = []  # lines to send again at their monotonic time
        self.parked: dict[str, list[Line]] = {}  # model → its lines not sent now (held back or not ready)
        self.until: dict[str, float] = {}  # model → monotonic time its lines may be sent again (after a 429/503)
        self.backoff: dict[str, float] = {}  # model → the seconds of its last hold-back
        self.served: dict[str, Served] = {}
        self.looked = 0.0  # monotonic time the deployments' states were last read
        self.left: Counter[str] = Counter()  # model → its lines not answered yet
        self.reason = ""  # the batch's waiting_reason as last written
        self.seen_next = 0.0  # monotonic time runner_seen_at is next written
        self.stopping: Status | None = None  # how a cancel or an expiry ends the batch, once it began
        self.stop_by = 0.0  # monotonic time the lines in flight at a cancel or an expiry are given up

    async def run(self) -> None:
        batch = await Batch.objects.aget(pk=self.pk)
        if batch.status in ENDED:
            return
        self.reason = batch.waiting_reason
        await sync_to_async(batches.enter)(self.pk, Status.IN_PROGRESS, from_statuses=(Status.VALIDATING,))
        pending = deque(await sync_to_async(_pending)(batch))
        self.left.update(line.model for line in pending)
        inflight: dict[asyncio.Task[float | None], Line] = {}
        try:
            while (end := await self._end(pending, inflight)) is None:
                if self.stopping is None:
                    await self._look(pending)
                    self._ready(pending)
                    self._send_some(pending, inflight)
                self.slots.wanting[self.pk] = bool(pending or inflight) and self.stopping is None
                if not inflight:
                    await asyncio.sleep(TICK)
                    continue
                done, _ = await asyncio.wait(inflight, timeout=TICK, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    line = inflight.pop(task)
                    self.slots.free += 1
                    if (delay := task.result()) is not None:
                        self.waiting.append((time.monotonic() + delay, line))
        finally:
            out = list(inflight.values())
            for task in inflight:  # cancelled, expired, or the runner stopped: lines in flight are left pending
                task.cancel()
            self.slots.free += len(inflight)
            await asyncio.gather(*inflight, return_exceptions=True)
        if self.stopping is not None and end == self.stopping:  # not one already ended: its files are written
            unsent = [
                *pending,
                *(line for _, line in self.waiting),
                *(x for lines in self.parked.values() for x in lines),
            ]
            await self._collect(out, unsent, end)
        await sync_to_async(batches.finish)(self.pk, end)  # a batch already ended is left as it is

    def _send_some(self, pending: deque[Line], inflight: dict[asyncio.Task[float | None], Line]) -> None:
        """Lines of ``pending`` sent while the slots allow; those of a model not sent now parked."""
        while pending and self.slots.free > 0 and len(inflight) < self.slots.share():
            line = pending.popleft()
            if self._held(line.model):
                self.parked.setdefault(line.model, []).append(line)
                continue
            self.slots.free -= 1
            inflight[asyncio.ensure_future(self._send(line))] = line

    def _held(self, model: str) -> bool:
        found = self.served.get(model)
        return (found is not None and found.held) or self.until.get(model, 0.0) > time.monotonic()

    async def _look(self, pending: deque[Line]) -> None:
        """Once a tick: the deployments of the models with lines left read again (a change of state ends a model's
        hold-back), parked lines no longer held put back in ``pending``, and the batch's waiting_reason written
        when it changed."""
        if time.monotonic() - self.looked < TICK:
            return
        self.looked = time.monotonic()
        models = sorted(m for m, n in self.left.items() if n > 0)
        now = await sync_to_async(served)(models)
        for model, found in now.items():
            if model in self.served and self.served[model] != found:
                self.until.pop(model, None)
                self.backoff.pop(model, None)
        self.served = now
        for model in [m for m in self.parked if not self._held(m)]:
            pending.extendleft(reversed(self.parked.pop(model)))
        waits = [f for m in models if (f := now.get(m)) is not None and f.held]
        reason = waits[0].waiting_words if waits else ""
        if reason != self.reason:
            await Batch.objects.filter(pk=self.pk).aupdate(waiting_reason=reason)
            self.reason = reason

    def _hold_back(self, model: str, retry_after: float) -> None:
        """Hold back every line of ``model`` after a 429/503: BACKOFF_FIRST seconds, doubled by each refusal met
        after the last hold-back ended, at most BACKOFF_MOST (or ``retry_after`` when longer)."""
        now = time.monotonic()
        if self.until.get(model, 0.0) > now:
            return  # a line sent before the hold-back: it counts once
        delay = min(BACKOFF_MOST, self.backoff.get(model, BACKOFF_FIRST / 2) * 2)
        self.backoff[model] = delay
        self.until[model] = now + max(delay, retry_after)

    def _ready(self, pending: deque[Line]) -> None:
        """The lines whose wait is over back at the front of ``pending``."""
        now = time.monotonic()
        ready = [line for at, line in self.waiting if at <= now]
        self.waiting = [(at, line) for at, line in self.waiting if at > now]
        pending.extendleft(reversed(ready))

    async def _end(self, pending: deque[Line], inflight: dict[Any, Line]) -> Status | None:
        """How the batch ends now, or None while it runs on (a cancelled or expired one while lines are in flight, up
        to STOP_GRACE: ``_stop``)."""
        if time.monotonic() >= self.seen_next:
            await Batch.objects.filter(pk=self.pk).aupdate(runner_seen_at=timezone.now())
            self.seen_next = time.monotonic() + SEEN_EVERY
        status, expires_at = await Batch.objects.filter(pk=self.pk).values_list("status", "expires_at").aget()
        if status in ENDED:
            return Status.CANCELLED
        if status == Status.CANCELLING:
            return self._stop(Status.CANCELLED, inflight)
        if self.stopping is not None or timezone.now() >= expires_at:
            return self._stop(Status.EXPIRED, inflight)
        if pending or inflight or self.waiting or self.parked:
            return None
        await sync_to_async(batches.enter)(self.pk, Status.FINALIZING, from_statuses=(Status.IN_PROGRESS,))
        return Status.COMPLETED

    def _stop(self, end: Status, inflight: dict[Any, Line]) -> Status | None:
        """A cancel or an expiry (``end``): how the batch ends once its lines in flight are answered or STOP_GRACE
        seconds have passed, None until then."""
        if self.stopping != end:
            self.stopping, self.stop_by = end, time.monotonic() + STOP_GRACE
        return end if not inflight or time.monotonic() >= self.stop_by else None

    async def _collect(self, out: list[Line], unsent: list[Line], end: Status) -> None:
        """At a cancel or an expiry (``end``): the answers the gateway kept for these lines stored (a line of an
        earlier runner may have one); the lines still in flight (``out``) without one recorded as cancelled or
        expired in flight, and at an expiry the lines never sent (``unsent``) as expired."""
        lines, in_flight = out + unsent, {line.pk for line in out}
        for start in range(0, len(lines), 500):
            part = lines[start : start + 500]
            found = await self.redis.mget([redis_key(answer_key(line.credential)) for line in part])
            unanswered: dict[int, dict[str, Any]] = {}
            for line, stored in zip(part, found, strict=True):
                if stored is not None:
                    await sync_to_async(batches.record)(line.pk, self.pk, *kept_answer(line, stored))
                    await self.redis.delete(redis_key(answer_key(line.credential)))
                elif end == Status.EXPIRED:
                    unanswered[line.pk] = expired(line, line.pk in in_flight)
                elif line.pk in in_flight:
                    unanswered[line.pk] = cancelled_in_flight(line)
            await sync_to_async(batches.record_failed)(self.pk, unanswered)

    async def _send(self, line: Line) -> float | None:
        """Send ``line`` and store its answer; the seconds to wait before sending it again when not answered (a
        429/503 holds back the line's model too)."""
        headers = {"authorization": f"Bearer {sign(line.credential)}", "x-request-id": line.credential.request_id}
        try:
            body = await BatchLine.objects.values_list("body", flat=True).aget(pk=line.pk)  # read when sent
            response = await self.http.post(line.url, json=body, headers=headers)
        except httpx.HTTPError:
            return RETRY_SECONDS
        if response.status_code in RETRIED:
            after = response.headers.get("retry-after", "")
            if response.status_code in HELD_BACK:
                self._hold_back(line.model, float(after) if after.isdigit() else 0.0)
                return 0.0  # back in pending at once, parked there while its model is held back
            return float(after) if after.isdigit() else RETRY_SECONDS
        try:
            answered: Any = response.json()
        except ValueError:
            answered = response.text
        request_id = response.headers.get("x-request-id", line.credential.request_id)
        ok, answer = answer_line(line, response.status_code, request_id, answered)
        await sync_to_async(batches.record)(line.pk, self.pk, ok, answer)
        await self.redis.delete(redis_key(answer_key(line.credential)))
        self.left[line.model] -= 1
        self.backoff.pop(line.model, None)
        return None


def lease_held() -> bool:
    """Whether a runner holds the lease now (blocking: Redis)."""
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1.0, socket_timeout=1.0)
    try:
        return bool(client.exists(lease_key()))
    finally:
        client.close()
