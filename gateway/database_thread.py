"""A thread of its own for a gateway part's database work (gateway.registry's loads, gateway.spool_writer's
writes): Django's connection is per thread, so the part keeps one connection, opened on first use, and its
queries never wait on the event loop's or another part's."""

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.db import close_old_connections, connection


class DatabaseThread:
    """One thread named ``<name>_0`` running what it is given in order, on its own database connection."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)

    async def run[T](self, work: Callable[[], T]) -> T:
        """``work()``'s result, run on the thread after a connection the database dropped (a restart, an outage)
        is put aside, so it connects afresh. Raises what ``work`` raises; after a database error the connection
        is closed, and the next ``run`` connects again."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, _fresh, work)

    def close(self) -> None:
        """Close the thread's connection once the work under way is done, and let the thread end; returns at once."""
        self._executor.submit(connection.close)
        self._executor.shutdown(wait=False)


def _fresh[T](work: Callable[[], T]) -> T:
    close_old_connections()
    try:
        return work()
    except Exception:
        connection.close()
        raise
