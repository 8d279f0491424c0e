"""Batch API lines the worker's runner sends (console.batches.runner): their credential checked, their key found,
and each answered once.

A line comes as any /v1 request does, with ``Authorization: Bearer hearth-batch-line.…`` (console.batches.
credential: an HMAC under a key derived from SECRET_KEY, compared in constant time). It is served as the batch
owner's key (its quotas, budgets, lanes and request-log row) at the batch class, with the plan's ``batch_id`` set
(gateway.app). A line for a deployment asleep is not a reason to wake it unless HEARTH_BATCH_WAKES_DEPLOYMENTS says
so: it is answered 503 ``deployment_asleep`` and the runner sends it again later.

Once (``once``): the line's relay runs whatever the runner does (its disconnect cancels nothing, ``kept``), its
answer is captured whole and kept in Redis for ANSWER_TTL seconds under ``batch-line:{batch}:{index}`` before it is
sent, and a line asked again is answered from there without the engine. While a line's relay runs its in-flight
mark (``…:running``, renewed while it runs, lapsing RUNNING_TTL after the gateway's process died) stands; the same
line asked meanwhile waits for the answer up to WAIT_SECONDS, then 409 with Retry-After (the runner asks again).
A refusal (GatewayError) keeps nothing: asking again is asked anew.
"""

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

import redis.asyncio as aioredis
from django.conf import settings

from appliance.redis_keys import redis_key
from console.batches.credential import PREFIX, LineCredential, answer_key, verify
from gateway import errors
from gateway.asgi_io import Receive, Send
from gateway.errors import GatewayError
from gateway.registry import KeyEntry, Snapshot

ANSWER_TTL = 48 * 3600  # seconds an answer is kept for a runner that did not store it (a batch's window is 24 h)
WAIT_SECONDS = 10.0  # how long a line asked while in flight waits for the answer before 409
POLL_SECONDS = 0.2
RUNNING_TTL = 60  # seconds a line's in-flight mark outlives its last renewal (every third of it while it runs)


def line_of(offered: list[str]) -> LineCredential | None:
    """The batch line the request's keys name, or None when none is a line credential. Raises GatewayError 401
    for a line credential that does not verify."""
    for token in offered:
        if token.startswith(PREFIX):
            line = verify(token)
            if line is None:
                raise errors.invalid_key()
            return line
    return None


def owner(snapshot: Snapshot, line: LineCredential) -> KeyEntry:
    """The batch owner's key entry (its current secret) at the batch class, refused as the key itself would be
    now: 401 when it was revoked, expired or is gone."""
    entries = [e for e in snapshot.keys.values() if e.id == line.key_id and e.grace_until is None]
    if not entries:
        raise errors.invalid_key()
    entry = entries[0]
    if entry.revoked_at is not None:
        raise errors.revoked_key(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(entry.revoked_at)))
    if entry.expires_at is not None and entry.expires_at <= time.time():
        raise errors.expired_key(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(entry.expires_at)))
    return replace(entry, priority="batch")


def asleep(model: str) -> GatewayError:
    """A batch line's refusal for a deployment asleep that batches may not wake (HEARTH_BATCH_WAKES_DEPLOYMENTS)."""
    return GatewayError(
        503,
        f"Model {model!r} is asleep and batches do not wake it (HEARTH_BATCH_WAKES_DEPLOYMENTS); the line waits.",
        type="server_error",
        code="deployment_asleep",
        retry_after=10,
    )


def may_wake() -> bool:
    return bool(settings.HEARTH_BATCH_WAKES_DEPLOYMENTS)


def kept(receive: Receive) -> Receive:
    """``receive`` until the request's body is read, then never a disconnect: the line's relay runs to its end."""
    read = False

    async def receiving() -> dict[str, Any]:
        nonlocal read
        if read:
            await asyncio.Event().wait()  # cancelled with the relay's watch when the answer is complete
        message = await receive()
        read = message["type"] == "http.request" and not message.get("more_body")
        return message

    return receiving


class _Captured:
    """A ``send`` that keeps the answer whole: status, headers and body."""

    def __init__(self) -> None:
        self.status, self.body = 0, bytearray()
        self.headers: list[tuple[bytes, bytes]] = []

    async def __call__(self, message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status, self.headers = message["status"], list(message.get("headers", ()))
        else:
            self.body += message.get("body", b"")


async def _replay(send: Send, stored: bytes | str) -> None:
    answer = json.loads(stored)
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer["headers"]]
    await send({"type": "http.response.start", "status": answer["status"], "headers": headers})
    await send({"type": "http.response.body", "body": answer["body"].encode("latin-1")})


async def once(redis: aioredis.Redis, line: LineCredential, send: Send, run: Callable[[Send], Awaitable[None]]) -> None:
    """Answer ``line`` from its kept answer, or by ``run`` (the relay, given the capturing send) once (module
    docstring). Raises GatewayError as ``run`` does, or 409 while the line is in flight elsewhere."""
    key = redis_key(answer_key(line))
    running = key + ":running"
    deadline = time.monotonic() + WAIT_SECONDS
    while not await redis.set(running, "1", nx=True, ex=RUNNING_TTL):
        if (stored := await redis.get(key)) is not None:
            await _replay(send, stored)
            return
        if time.monotonic() > deadline:
            raise GatewayError(409, "This batch line is in flight; ask again.", code="line_in_flight", retry_after=5)
        await asyncio.sleep(POLL_SECONDS)
    keeper = asyncio.ensure_future(_keep(redis, running))
    try:
        if (stored := await redis.get(key)) is not None:
            await _replay(send, stored)
            return
        captured = _Captured()
        await run(captured)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in captured.headers]
        answer = {"status": captured.status, "headers": headers, "body": bytes(captured.body).decode("latin-1")}
        stored = json.dumps(answer).encode()
        await redis.set(key, stored, ex=ANSWER_TTL)
    finally:
        keeper.cancel()
        await redis.delete(running)
    await _replay(send, stored)


async def _keep(redis: aioredis.Redis, running: str) -> None:
    """The in-flight mark renewed while the relay runs (it lapses RUNNING_TTL after this process dies)."""
    while True:
        await asyncio.sleep(RUNNING_TTL / 3)
        await redis.expire(running, RUNNING_TTL)
