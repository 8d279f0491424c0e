"""The requests under way in one gateway process, kept for its stop.

At a stop uvicorn waits HEARTH_DRAIN_SECONDS, cancels the requests still open, and at once asks for the lifespan's
shutdown; the process exits right after it. A cancelled request still has work left: a stream frees its key's
concurrency slot in Redis, then sends its error event (gateway.relay_stream), which waits for the client to read
when the socket is full; every request notes its end in the ledger. Before the ledger and the Redis clients stop,
gateway.app waits for them (``let_end``): CI once saw a stream cut without its error event when they were not
waited for.
"""

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)
# seconds the cancelled requests are given to end: within the 5 s scripts/down.sh and compose's stop_grace_period
# allow beyond HEARTH_DRAIN_SECONDS
ENDING_SECONDS = 3.0
FLUSH_SECONDS = 0.5  # then for what their last sends left in their connections' buffers to go out


class OpenRequests:
    """The requests under way: each request's task, from ``add`` until it is done (one set insertion and one
    done-callback a request; nothing a chunk)."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()

    def add(self) -> None:
        """The current task (uvicorn runs each request in its own) kept until it is done."""
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def let_end(self) -> None:
        """Wait up to ENDING_SECONDS for the requests not done yet (logged when some are left), then FLUSH_SECONDS
        for their last bytes to leave the process (a send does not wait for that); at once when none is open."""
        ending = [task for task in self.tasks if not task.done()]
        if not ending:
            return
        _, left = await asyncio.wait(ending, timeout=ENDING_SECONDS)
        if left:
            log.warning(
                "%d requests had not ended %g s after they were cancelled at the stop", len(left), ENDING_SECONDS
            )
        await asyncio.sleep(FLUSH_SECONDS)
