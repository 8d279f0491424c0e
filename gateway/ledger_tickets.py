"""What gateway.ledger keeps of one request (``Ticket``: from its note to its row, with its concurrency slot) and of
one end Redis did not take (``Unsent``)."""

import asyncio
from dataclasses import dataclass
from typing import Any

from console.observability.request_rows import Row
from gateway.asgi_io import Receive
from gateway.relay_state import RelayState
from gateway.reservations import Reservation


@dataclass(slots=True)
class Unsent:
    """An end Redis did not take: its FINISH call, and its row (with its cost), written to the database directly
    while Redis stays away."""

    keys: list[str]
    args: list[str | int]
    row: Row
    written: bool = False


@dataclass(slots=True)
class Ticket:
    """One request of this process from its note to its row: its id, its note's fixed fields, what changes
    while it is relayed, whether its note was written, and its reservation."""

    request_id: str
    fields: dict[str, Any]
    state: RelayState
    limited: bool  # its key has limits or budgets: admitted through Redis
    noted: bool = False
    noting: "asyncio.Future[None] | None" = None  # done once its note's call answered (a key without limits)
    held: Reservation | None = None
    said: tuple[int, int] = (0, 0)  # (output token events, status) its note says
    receive: Receive | None = None  # its client's connection, read for whether the client left (asgi_io.client_left)
    holds_slot: bool = False  # it holds one of its key's concurrency slots (Ledger.free_slot gives it back)
    slot_freed: "asyncio.Future[None] | None" = None  # done once it does, made by a request waiting for that
