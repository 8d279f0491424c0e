"""The batch runner: a batch's pending lines sent through the gateway's own /v1 endpoint, HEARTH_BATCH_CONCURRENCY at
once, each as its owner key at the batch class (console.batches.credential), until every line is answered, the
batch is cancelled or it expires; then its output and error files are written (console.batches.batches.finish).

Exactly once, across restarts:
- One runner per batch: a lease in Redis (``batch-runner:{id}``, LEASE_SECONDS, renewed each tick). A runner that
  finds it held leaves; beat's sweep (console.batches.tasks) starts a runner for a running batch whose lease lapsed
  (its worker died), and a worker's start sweeps too.
- A line is answered once in the database: its answer and the batch's request_counts are written in one transaction,
  only while the line is pending (batches.record); a resumed runner sends only pending lines, so none is skipped.
- A line is sent to the engine once: the gateway keeps a line's relay going when the runner goes away, stores the
  answer in Redis (gateway.batch_lines) and answers the same line's next request with it, without the engine. The
  runner deletes that answer once its own is stored. Not covered: the gateway's process dying with a line in flight
  (the line is sent again when its in-flight mark lapses).
- Not answered, sent again after a while (Retry-After, else RETRY_SECONDS): 429 (limits, lanes), 503 (a deployment
  not ready, or asleep when HEARTH_BATCH_WAKES_DEPLOYMENTS is off: the batch waits in_progress), 409 (the line in
  flight from before a restart), and no answer at all (the gateway down).
"""

import asyncio
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
from console.batches.models import ENDED, Batch, BatchLine, LineState, Status

LEASE_SECONDS = 15
TICK = 0.5  # seconds between looks at the batch's status (cancel, expiry)
RETRY_SECONDS = 5.0
SEEN_EVERY = 5.0  # seconds between the runner's notes that it runs (Batch.runner_seen_at)
RETRIED = {409, 429, 503}


def lease_key(batch_pk: int) -> str:
    return redis_key(f"batch-runner:{batch_pk}")


@dataclass(frozen=True, slots=True)
class Line:
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


async def run(batch_pk: int) -> None:
    """Run batch ``batch_pk`` to its end, unless another runner holds its lease."""
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    token = secrets.token_hex(8)
    try:
        if await client.set(lease_key(batch_pk), token, nx=True, ex=LEASE_SECONDS):
            try:
                await _Runner(batch_pk, client).run()
            finally:
                if await client.get(lease_key(batch_pk)) == token.encode():
                    await client.delete(lease_key(batch_pk))
    finally:
        await client.aclose()
        await sync_to_async(connections.close_all)()


class _Runner:
    def __init__(self, batch_pk: int, client: aioredis.Redis) -> None:
        self.pk, self.redis = batch_pk, client
        self.waiting: list[tuple[float, Line]] = []  # lines to send again at their monotonic time
        self.seen_next = 0.0  # monotonic time runner_seen_at is next written

    async def run(self) -> None:
        batch = await Batch.objects.aget(pk=self.pk)
        if batch.status in ENDED:
            return
        await sync_to_async(batches.enter)(self.pk, Status.IN_PROGRESS, from_statuses=(Status.VALIDATING,))
        pending = deque(await sync_to_async(_pending)(batch))
        inflight: dict[asyncio.Task[float | None], Line] = {}
        timeout = httpx.Timeout(settings.HEARTH_STREAM_IDLE_TIMEOUT + 60, connect=10)
        async with httpx.AsyncClient(base_url=settings.HEARTH_GATEWAY_URL, timeout=timeout) as http:
            try:
                while (end := await self._end(pending, inflight)) is None:
                    self._ready(pending)
                    while pending and len(inflight) < max(1, settings.HEARTH_BATCH_CONCURRENCY):
                        line = pending.popleft()
                        inflight[asyncio.ensure_future(self._send(http, line))] = line
                    if not inflight:
                        await asyncio.sleep(TICK)
                        continue
                    done, _ = await asyncio.wait(inflight, timeout=TICK, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        line = inflight.pop(task)
                        if (delay := task.result()) is not None:
                            self.waiting.append((time.monotonic() + delay, line))
            finally:
                for task in inflight:  # cancelled or expired: lines in flight are left pending
                    task.cancel()
                await asyncio.gather(*inflight, return_exceptions=True)
        await sync_to_async(batches.finish)(self.pk, end)  # a batch already ended is left as it is

    def _ready(self, pending: deque[Line]) -> None:
        """The lines whose wait is over back at the front of ``pending``."""
        now = time.monotonic()
        ready = [line for at, line in self.waiting if at <= now]
        self.waiting = [(at, line) for at, line in self.waiting if at > now]
        pending.extendleft(reversed(ready))

    async def _end(self, pending: deque[Line], inflight: dict[Any, Line]) -> Status | None:
        """How the batch ends now (its lease renewed first), or None while it runs on."""
        await self.redis.expire(lease_key(self.pk), LEASE_SECONDS)
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

    async def _send(self, http: httpx.AsyncClient, line: Line) -> float | None:
        """Send ``line`` and store its answer; the seconds to wait before sending it again when not answered."""
        headers = {"authorization": f"Bearer {sign(line.credential)}", "x-request-id": line.credential.request_id}
        try:
            body = await BatchLine.objects.values_list("body", flat=True).aget(pk=line.pk)  # read when sent
            response = await http.post(line.url, json=body, headers=headers)
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


def lease_held(batch_pk: int) -> bool:
    """Whether a runner holds the batch's lease now (blocking: Redis)."""
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1.0, socket_timeout=1.0)
    try:
        return bool(client.exists(lease_key(batch_pk)))
    finally:
        client.close()
