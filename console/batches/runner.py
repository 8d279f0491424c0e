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
- Not answered, sent again after a while (Retry-After, else RETRY_SECONDS): 429 (limits, lanes), 503 (a deployment
  not ready, or asleep when HEARTH_BATCH_WAKES_DEPLOYMENTS is off: the batch waits in_progress), 409 (the line in
  flight from before a restart), and no answer at all (the gateway down).
"""

import asyncio
import logging
import secrets
import time
from collections import deque
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
from console.batches.models import ENDED, RUNNING, Batch, BatchLine, LineState, Status

log = logging.getLogger(__name__)
LEASE_SECONDS = 15  # the runner's lease outlives its last renewal (every tick) this long
TICK = 0.5  # seconds between looks at the batch's status (cancel, expiry)
RETRY_SECONDS = 5.0  # seconds before a line not answered is sent again when no Retry-After says
SEEN_EVERY = 5.0  # seconds between the runner's notes that it runs (Batch.runner_seen_at)
RETRIED = {409, 429, 503}


def lease_key() -> str:
    """``hearth:<instance>:batch-runner``: held by the running runner (a random token), LEASE_SECONDS at a time."""
    return redis_key("batch-runner")


@dataclass(frozen=True, slots=True)
class Line:
    """A pending line as the runner sends it (its body is read from the database when it is sent)."""

    pk: int
    credential: LineCredential
    custom_id: str
    url: str


def answer_line(line: Line, status: int, request_id: str, body: Any) -> tuple[bool, dict[str, Any]]:
    """Whether the line succeeded, and its output- or error-file line in OpenAI's shape."""
    ok = 200 <= status < 300
    error = None
    if not ok:
        found = body.get("error") if isinstance(body, dict) else None
        detail: dict[str, Any] = found if isinstance(found, dict) else {}
        code = detail.get("code") or detail.get("type") or f"http_{status}"
        error = {"code": code, "message": detail.get("message") or f"The request was answered with HTTP {status}."}
    response = {"status_code": status, "request_id": request_id, "body": body}
    return ok, {"id": line.credential.request_id, "custom_id": line.custom_id, "response": response, "error": error}


def _pending(batch: Batch) -> list[Line]:
    rows = batch.lines.filter(state=LineState.PENDING).order_by("index")
    return [
        Line(pk, LineCredential(batch.public_id, index, batch.key_id), custom_id, url)
        for pk, index, custom_id, url in rows.values_list("pk", "index", "custom_id", "url")
    ]


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
        self.seen_next = 0.0  # monotonic time runner_seen_at is next written

    async def run(self) -> None:
        batch = await Batch.objects.aget(pk=self.pk)
        if batch.status in ENDED:
            return
        await sync_to_async(batches.enter)(self.pk, Status.IN_PROGRESS, from_statuses=(Status.VALIDATING,))
        pending = deque(await sync_to_async(_pending)(batch))
        inflight: dict[asyncio.Task[float | None], Line] = {}
        try:
            while (end := await self._end(pending, inflight)) is None:
                self._ready(pending)
                self.slots.wanting[self.pk] = bool(pending or inflight)
                while pending and self.slots.free > 0 and len(inflight) < self.slots.share():
                    line = pending.popleft()
                    self.slots.free -= 1
                    inflight[asyncio.ensure_future(self._send(line))] = line
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
            for task in inflight:  # cancelled, expired, or the runner stopped: lines in flight are left pending
                task.cancel()
            self.slots.free += len(inflight)
            await asyncio.gather(*inflight, return_exceptions=True)
        await sync_to_async(batches.finish)(self.pk, end)  # a batch already ended is left as it is

    def _ready(self, pending: deque[Line]) -> None:
        """The lines whose wait is over back at the front of ``pending``."""
        now = time.monotonic()
        ready = [line for at, line in self.waiting if at <= now]
        self.waiting = [(at, line) for at, line in self.waiting if at > now]
        pending.extendleft(reversed(ready))

    async def _end(self, pending: deque[Line], inflight: dict[Any, Line]) -> Status | None:
        """How the batch ends now, or None while it runs on."""
        if time.monotonic() >= self.seen_next:
            await Batch.objects.filter(pk=self.pk).aupdate(runner_seen_at=timezone.now())
            self.seen_next = time.monotonic() + SEEN_EVERY
        status, expires_at = await Batch.objects.filter(pk=self.pk).values_list("status", "expires_at").aget()
        if status == Status.CANCELLING or status in ENDED:
            return Status.CANCELLED
        if timezone.now() >= expires_at:
            return Status.EXPIRED
        if pending or inflight or self.waiting:
            return None
        await sync_to_async(batches.enter)(self.pk, Status.FINALIZING, from_statuses=(Status.IN_PROGRESS,))
        return Status.COMPLETED

    async def _send(self, line: Line) -> float | None:
        """Send ``line`` and store its answer; the seconds to wait before sending it again when not answered."""
        headers = {"authorization": f"Bearer {sign(line.credential)}", "x-request-id": line.credential.request_id}
        try:
            body = await BatchLine.objects.values_list("body", flat=True).aget(pk=line.pk)  # read when sent
            response = await self.http.post(line.url, json=body, headers=headers)
        except httpx.HTTPError:
            return RETRY_SECONDS
        if response.status_code in RETRIED:
            after = response.headers.get("retry-after", "")
            return float(after) if after.isdigit() else RETRY_SECONDS
        try:
            answered: Any = response.json()
        except ValueError:
            answered = response.text
        request_id = response.headers.get("x-request-id", line.credential.request_id)
        ok, answer = answer_line(line, response.status_code, request_id, answered)
        await sync_to_async(batches.record)(line.pk, self.pk, ok, answer)
        await self.redis.delete(redis_key(answer_key(line.credential)))
        return None


def lease_held() -> bool:
    """Whether a runner holds the lease now (blocking: Redis)."""
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1.0, socket_timeout=1.0)
    try:
        return bool(client.exists(lease_key()))
    finally:
        client.close()
