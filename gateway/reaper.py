"""The requests of gateway processes that died, recorded by a living one: each as cut, with what it was sent.

A gateway process is named by ``process_identity``: its host's name, its PID namespace, its PID and its start
time, so a PID used again names another process. It is gone when its alive key has expired (it was not renewed
for console.observability.request_spool.ALIVE_SECONDS: the process is dead, wherever it ran), or, on the same
host and PID namespace, at once when no process with its PID and start time runs (a relay killed and restarted
by uvicorn's supervisor is seen within a few seconds). Every gateway process looks (gateway.ledger's loop).

A dead process's notes become rows through FINISH (gateway.finishes), which settles each request's
reservation, or charges a key without limits, for the tokens the note says were sent, and takes the request out of
its deployment's requests in flight (console.deployments.activity); FINISH does nothing more for a note another
process recorded first, and the row's request id keeps it one row whoever writes it. A note says
what its process last wrote: the output tokens counted then (gateway.ledger renews notes every TICK seconds),
the engine's status and TTFT; the prompt's tokens are not known (None). The row ends at the note's last
renewal, status 200 and truncated when the answer's head had gone out, else 502; its error (``PROCESS_GONE``) says
why, since its client was told nothing: its connection just closed.
"""

import hashlib
import json
import logging
import os
import socket
from typing import Any

import redis.asyncio as aioredis

from console.observability.request_rows import Row, encode
from console.observability.request_spool import alive_key, notes_key, processes_key, text
from gateway.finishes import finish_call
from gateway.prices import price_factor
from gateway.reservations import counter_keys, settlement

log = logging.getLogger(__name__)
PROCESS_GONE = (
    "The Hearth web process relaying this request stopped (killed or crashed) before the request ended; "
    "its client's connection was cut with no error message sent (clients report a connection error). Recorded "
    "from its last note, at most a few seconds old: the output tokens counted then, the prompt's not known."
)


def process_identity(pid: int | None = None) -> str:
    """``host/namespace/pid/start`` of this process (or of ``pid`` here): the namespace a digest of the PID
    namespace and boot, the start in clock ticks since boot (Linux; '' elsewhere)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}/{_namespace()}/{pid}/{_started(pid)}"


def gone_here(identity: str) -> bool:
    """Whether ``identity`` names a process of this host and PID namespace that no longer runs (False for one
    elsewhere: only its alive key can tell)."""
    try:
        host, namespace, pid, started = identity.rsplit("/", 3)
        number = int(pid)
    except ValueError:
        return False
    if host != socket.gethostname() or namespace != _namespace():
        return False
    try:
        os.kill(number, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's process has this PID: its start time says whether it is the one
    return _started(number) != started


def _namespace() -> str:
    try:
        seen = os.readlink("/proc/self/ns/pid") + open("/proc/sys/kernel/random/boot_id").read().strip()
    except OSError:
        return "-"
    return hashlib.sha256(seen.encode()).hexdigest()[:12]


def _started(pid: int) -> str:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after the command's name


async def reap(redis: aioredis.Redis, finish: Any, me: str) -> int:
    """Record the notes of every gateway process that is gone (module docstring) and forget the process;
    returns the requests recorded. ``finish`` is the FINISH script registered on ``redis``. Raises RedisError."""
    others = [p for p in map(text, await redis.smembers(processes_key())) if p != me]
    if not others:
        return 0
    alive = await redis.mget([alive_key(p) for p in others])
    recorded = 0
    for process, flag in zip(others, alive, strict=True):
        if flag is None or gone_here(process):
            recorded += await _reap_one(redis, finish, process)
    return recorded


async def _reap_one(redis: aioredis.Redis, finish: Any, process: str) -> int:
    notes, recorded = notes_key(process), 0
    for rid, raw in (await redis.hgetall(notes)).items():
        request_id = text(rid)
        try:
            keys, args = cut(request_id, json.loads(raw), notes)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("note of request %s of gone process %s unreadable (%s); dropped", request_id, process, exc)
            await redis.hdel(notes, rid)
            continue
        recorded += 1 if await finish(keys=keys, args=args) else 0
    if recorded:
        log.warning("gateway process %s is gone: %d of its requests recorded as cut", process, recorded)
    if not await redis.hlen(notes):
        async with redis.pipeline(transaction=True) as pipe:
            pipe.srem(processes_key(), process)
            pipe.delete(alive_key(process), notes)
            await pipe.execute()
    return recorded


def cut(request_id: str, note: dict[str, Any], notes: str) -> tuple[list[str], list[str | int]]:
    """FINISH's KEYS and ARGV recording the request of ``note`` (in the hash ``notes``) as cut."""
    row = cut_row(request_id, note)
    used = row["completion_tokens"]
    owner = note.get("owner_id")
    if "held" in note:  # admitted with a reservation: settled as its process would have
        cost, price = note["held"]
        keys = counter_keys(note["key_id"], owner, note["deployment_id"], note["admitted"])
        settle = settlement(keys, request_id, note["reserve"], used, int(cost), price, bool(note["owned"]))
    else:  # a key without limits: charged now, at the price of now
        keys = counter_keys(note["key_id"], owner, note["deployment_id"], note["started"])
        factor = price_factor(note.get("priority", ""))
        settle = settlement(keys, "", 0, used, 0, "?", owner is not None, factor=factor)
    return finish_call(notes, request_id, True, encode(row), "", settle, note["deployment_id"], None)


def cut_row(request_id: str, note: dict[str, Any]) -> Row:
    """The row of a request whose process died while relaying it (module docstring), without its cost."""
    started = float(note["started"])
    ended = max(float(note.get("updated", started)), started)
    status = int(note.get("status") or 0) or 502
    return {
        "request_id": request_id,
        "client_request_id": note.get("client_request_id"),
        "created_at": ended,
        "api_key_id": note["key_id"],
        "model": note["model"],
        "surface": note["surface"],
        "endpoint": note["endpoint"],
        "stream": bool(note["stream"]),
        "status": status,
        "prompt_tokens": None,
        "completion_tokens": int(note.get("chunks", 0)),
        "ttft_seconds": note.get("ttft"),
        "duration_seconds": ended - started,
        "truncated": status == 200,
        "usage_estimated": True,
        "key_prefix": note["prefix"],
        "priority": note.get("priority") or "standard",
        "batch_id": note.get("batch_id") or "",
        "error": PROCESS_GONE,
    }
