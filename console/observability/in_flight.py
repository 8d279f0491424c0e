"""The requests the gateway relays now, read from the notes its processes keep in Redis (gateway.ledger writes them,
console.observability.request_spool names the keys): per deployment, how many are running and, for those whose
first token went out, their user-visible TTFT and ITL so far.

A note is written when a request starts and rewritten every gateway.ledger.TICK seconds (2 s) while its progress
changes: ``started`` (Unix s, its arrival), ``ttft`` (seconds from its arrival to its first generated token going
out, once it has), ``chunks`` (events that carried generated tokens so far) and ``updated`` (Unix s of that
rewrite). So a TTFT shows here within TICK seconds of the first byte, not at the request's end. ITL so far is
(updated − started − TTFT) / (chunks − 1): per token event (an engine that sends several tokens in one event reads
slower here than in its finished row, which divides by tokens), and the last event came at most TICK before
``updated`` (the figure is high by at most TICK / (chunks − 1)).

The notes of a process whose alive key has lapsed are left out: that process is gone, and gateway.reaper records
its requests as cut. A request that ends between the reading of the request log and of the notes can be seen in
both or neither for one refresh.
"""

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import redis
from django.conf import settings

from console.observability.request_spool import alive_key, notes_key, processes_key, text

log = logging.getLogger(__name__)
READ_TIMEOUT = 2.0  # seconds a panel waits on Redis for the notes before it shows "no data" for them


@dataclass
class InFlight:
    """One deployment's requests in flight: how many, and the user-visible TTFTs and ITLs (seconds) of those that
    have them so far."""

    running: int = 0
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)


def itl_so_far(note: dict[str, object]) -> float | None:
    """A running request's mean inter-token latency so far (module docstring), seconds; None before its second
    token event or for a note without progress."""
    ttft, chunks, started, updated = (note.get(k) for k in ("ttft", "chunks", "started", "updated"))
    if not isinstance(ttft, int | float) or not isinstance(chunks, int) or chunks < 2:
        return None
    if not isinstance(started, int | float) or not isinstance(updated, int | float):
        return None
    return max(updated - started - ttft, 0.0) / (chunks - 1)


def tally(notes: Iterable[bytes | str], deployment_ids: Iterable[int]) -> dict[int, InFlight]:
    """Each deployment's requests in flight from the notes (JSON, gateway.ledger), by deployment id (every id
    present, empty when none); a note that is not JSON is logged and left out."""
    out = {pk: InFlight() for pk in deployment_ids}
    for raw in notes:
        try:
            note = json.loads(raw)
        except ValueError:
            log.warning("a gateway note that is not JSON (%r); left out of the requests in flight", raw[:80])
            continue
        pk = note.get("deployment_id") if isinstance(note, dict) else None
        if not isinstance(pk, int) or (flight := out.get(pk)) is None:
            continue
        flight.running += 1
        if isinstance(ttft := note.get("ttft"), int | float):
            flight.ttft.append(float(ttft))
        if (itl := itl_so_far(note)) is not None:
            flight.itl.append(itl)
    return out


def in_flight(deployment_ids: Iterable[int]) -> dict[int, InFlight] | None:
    """The requests in flight of these deployments, by id, from every living gateway process's notes (two Redis
    round trips); None when Redis does not answer (logged): the panels then say they cannot tell."""
    ids = list(deployment_ids)
    r = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=READ_TIMEOUT, socket_connect_timeout=READ_TIMEOUT)
    try:
        processes = [text(p) for p in r.smembers(processes_key())]
        with r.pipeline(transaction=False) as pipe:
            for process in processes:
                pipe.exists(alive_key(process))
                pipe.hvals(notes_key(process))
            answers = pipe.execute()
    except (redis.RedisError, OSError) as exc:
        log.warning("Redis does not answer: the requests in flight are not known (%s)", exc)
        return None
    alive, notes = answers[0::2], answers[1::2]
    return tally((n for living, held in zip(alive, notes, strict=True) if living for n in held), ids)
