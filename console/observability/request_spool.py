"""The spool of request log rows in Redis, between the gateway and the database, and the notes of the requests
being relayed; the reading of the spool that beat's accounting check does.

Keys, under the instance's prefix (appliance.redis_keys):

- ``requestlog:spool``, a stream: one entry per finished request, ``row`` (console.observability.request_rows,
  without its cost) and ``cost`` (nano-USD; '' none), added by the gateway in the same script call that settles
  the request's charges (gateway.reservations.FINISH). The consumer group ``writers`` reads it: each gateway
  process (gateway.spool_writer) and beat's check (``drain``) write the rows they read, then acknowledge and
  delete the entries; an entry read by a reader that died, or that could not write it, is taken by another once
  it has been waiting CLAIM_IDLE seconds. While the database is unreachable the entries wait in Redis.
- ``requestlog:processes``, a set of the gateway processes that note requests (gateway.ledger); for each,
  ``requestlog:notes:<process>``, a hash of request id → note (JSON) of each request it relays now, and
  ``requestlog:alive:<process>``, which the process renews every few seconds with an ALIVE_SECONDS TTL.

Durability is Redis's: entries wait in its memory until written, so a Redis server that restarts without
persistence loses those it held (seconds' worth, or an outage's worth while the database is down).
"""

import logging
import time
from typing import Any

import redis
from django.conf import settings

from appliance.redis_keys import redis_key
from console.observability.request_rows import Row, decode, write_rows

log = logging.getLogger(__name__)
GROUP = "writers"
CLAIM_IDLE = 30.0  # seconds an entry may wait read and unacknowledged before another reader takes it
BATCH = 500  # entries read at once
ALIVE_SECONDS = 60  # the TTL of a gateway process's alive key: gone that long, its requests are recorded as cut
FORGET_READERS_AFTER = 3600.0  # seconds a reader with nothing pending may be silent before it is forgotten

Entry = tuple[bytes, dict[bytes, bytes]]  # (id, fields) as redis-py returns a stream entry


def spool_key() -> str:
    return redis_key("requestlog:spool")


def processes_key() -> str:
    return redis_key("requestlog:processes")


def notes_key(process: str) -> str:
    return redis_key(f"requestlog:notes:{process}")


def alive_key(process: str) -> str:
    return redis_key(f"requestlog:alive:{process}")


def rows_of(entries: list[Entry]) -> tuple[list[bytes], list[Row]]:
    """The entries' ids and rows, each row's cost put back in; an entry that holds no row is logged and left out
    of the rows (its id is kept: it is acknowledged with the rest, never read again)."""
    ids, rows = [], []
    for entry_id, fields in entries:
        ids.append(entry_id)
        try:
            row = decode(fields[b"row"])
            cost = fields.get(b"cost", b"")
            row["cost_usd"] = int(cost) if cost else None
        except (KeyError, ValueError) as exc:
            log.error("request log spool entry %r holds no row (%s); dropped", entry_id, exc)
            continue
        rows.append(row)
    return ids, rows


def read_entries(read: Any) -> list[Entry]:
    """The entries of an XREADGROUP's answer (one stream; nothing when it timed out)."""
    return list(read[0][1]) if read else []


def text(value: bytes | str) -> str:
    """A Redis answer's bytes as text."""
    return value.decode() if isinstance(value, bytes) else value


def is_missing_group(exc: redis.ResponseError) -> bool:
    """Whether Redis refused a read because the stream or its group is gone (a flushed or restarted Redis)."""
    return str(exc).startswith("NOGROUP")


def ensure_group(r: "redis.Redis") -> None:
    """The readers' group, made with the stream when either is missing (reading from the stream's start)."""
    try:
        r.xgroup_create(spool_key(), GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def drain(consumer: str, seconds: float = 20.0) -> int:
    """Beat's reading of the spool: entries left waiting by readers (CLAIM_IDLE seconds or more), then new
    ones, written and deleted batch by batch for at most ``seconds``; readers long silent with nothing pending
    are forgotten. Returns the rows written. Raises what the driver raises when the database cannot write
    (the entries stay in the spool, read by this consumer: claimed again later) and RedisError."""
    r = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=10)
    ensure_group(r)
    deadline, written = time.monotonic() + seconds, 0
    cursor = "0-0"
    while time.monotonic() < deadline:
        found = r.xautoclaim(spool_key(), GROUP, consumer, int(CLAIM_IDLE * 1000), cursor, count=BATCH)
        cursor, claimed = found[0], found[1]
        written += _write_and_delete(r, claimed)
        if cursor in (b"0-0", "0-0"):
            break
    while time.monotonic() < deadline:
        entries = read_entries(r.xreadgroup(GROUP, consumer, {spool_key(): ">"}, count=BATCH))
        if not entries:
            break
        written += _write_and_delete(r, entries)
    _forget_silent_readers(r)
    return written


def _write_and_delete(r: "redis.Redis", entries: list[Entry]) -> int:
    if not entries:
        return 0
    ids, rows = rows_of(entries)
    written = write_rows(rows)
    with r.pipeline(transaction=False) as pipe:
        pipe.xack(spool_key(), GROUP, *ids)
        pipe.xdel(spool_key(), *ids)
        pipe.execute()
    return written


def _forget_silent_readers(r: "redis.Redis") -> None:
    for reader in r.xinfo_consumers(spool_key(), GROUP):
        if not reader["pending"] and reader["idle"] > FORGET_READERS_AFTER * 1000:
            r.xgroup_delconsumer(spool_key(), GROUP, reader["name"])
