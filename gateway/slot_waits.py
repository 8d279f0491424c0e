"""The waits before a key's refusal for its limit of requests at once (gateway.quotas.SlotsTaken), so that a client
that leaves a stream and sends its next request at once is not refused for the slot it left.

A slot is given back by the relay's task once it is told its client left (gateway.ledger.Ledger.free_slot), a few
turns of the event loop after the server saw the connection close; the next request may reach admission first.

- **Held in this process** (``left_slot_freed``): the server saw the close before the next request's bytes, and
  reads it before any task is told (gateway.asgi_io.client_left), so a refusal waits for exactly the slots whose
  clients left, SLOT_WAIT seconds at most, and none when every holder's client is still there.
- **Given back since the refusal** (``slot_freed_since``): the relay's task freed it between the admission's check
  and the refusal's coming back; tried again at once.
- **Held in another relay process** (``slot_freed_since`` too; the appliance runs one per core and the kernel deals
  the connections among them): that process may not have run since its client left, and this one cannot see its
  connections. The refusal looks at those slots for FOREIGN_GRACE seconds at most and is tried once more as soon
  as one is given back. A key really at its limit with slots held elsewhere gets its 429 that much later.
"""

import asyncio
from collections.abc import Mapping
from typing import cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.asgi_io import client_left
from gateway.ledger_tickets import Ticket
from gateway.reservations import running_key

SLOT_WAIT = 5.0  # seconds at most a refused request waits for a slot of this process whose client left
FOREIGN_PAUSES = (0.01, 0.02, 0.04, 0.08, 0.1)  # seconds between looks at another process's slots
FOREIGN_GRACE = sum(FOREIGN_PAUSES)  # 0.25 s


async def left_slot_freed(open_tickets: Mapping[str, Ticket], ticket: Ticket) -> bool:
    """Wait until one of the concurrency slots held by requests of ``ticket``'s key in this process whose clients
    left (``open_tickets``: this process's requests by id) is given back, SLOT_WAIT seconds at most; False at once
    when there is none."""
    key_id = ticket.fields["key_id"]
    left = [
        t for t in open_tickets.values() if t.holds_slot and t.fields["key_id"] == key_id and client_left(t.receive)
    ]
    if not left:
        return False
    freed = []
    for t in left:
        if t.slot_freed is None:
            t.slot_freed = asyncio.get_running_loop().create_future()
        freed.append(t.slot_freed)
    await asyncio.wait(freed, timeout=SLOT_WAIT, return_when=asyncio.FIRST_COMPLETED)
    return True


async def slot_freed_since(redis: Redis, open_tickets: Mapping[str, Ticket], ticket: Ticket, limit: int) -> bool:
    """Whether a concurrency slot of ``ticket``'s key (``limit`` of them) is free now, having been given back since
    the refusal (a relay's task can free its slot between the admission's check and this look), or is given back
    by another process within FOREIGN_GRACE seconds (looked at after each of FOREIGN_PAUSES). False at once when
    every slot is held here, and when Redis does not answer (the refusal stands)."""
    running = running_key(ticket.fields["key_id"])
    try:
        members = cast(list[bytes], await redis.zrange(running, 0, -1))
        if len(members) < limit:
            return True
        foreign = [m.decode() for m in members if m.decode() not in open_tickets]
        for pause in FOREIGN_PAUSES if foreign else ():
            await asyncio.sleep(pause)
            if None in await redis.zmscore(running, foreign):
                return True
    except (RedisError, OSError):
        return False
    return False
