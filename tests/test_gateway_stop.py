"""The gateway's stop (gateway.app.Gateway.lifespan): uvicorn asks for the lifespan's shutdown as soon as it has
cancelled the requests still open HEARTH_DRAIN_SECONDS after a stop, and the process exits after it. A cancelled
request still has work left (its slot freed in Redis, then its stream's error event sent; its row noted): the
shutdown waits for it before the ledger and the Redis clients stop. CI once saw a stream of tests/test_web_restart.py
cut without its error event."""

import asyncio
from collections.abc import Mapping
from typing import Any

from gateway.app import Gateway


def test_the_shutdown_waits_for_the_requests_uvicorn_cancelled_to_end_before_the_ledger_stops() -> None:
    done: list[str] = []

    async def test() -> None:
        gateway = Gateway()

        async def dispatch(*args: object) -> None:
            try:
                await asyncio.sleep(3600)  # a stream being relayed
            except asyncio.CancelledError:
                await asyncio.sleep(0.2)  # its slot freed in Redis, then its error event sent
                done.append("request ended")
                raise

        async def ledger_stop() -> None:
            done.append("ledger stopped")

        gateway._dispatch = dispatch  # type: ignore[method-assign,assignment]
        gateway.ledger.stop = ledger_stop  # type: ignore[method-assign]
        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}

        async def never() -> dict[str, Any]:
            await asyncio.Event().wait()
            return {}

        async def client(message: Mapping[str, Any]) -> None:
            pass

        request = asyncio.ensure_future(gateway(scope, never, client))
        await asyncio.sleep(0.05)
        request.cancel()  # uvicorn, HEARTH_DRAIN_SECONDS after the stop
        messages = iter([{"type": "lifespan.shutdown"}])
        sent: list[str] = []

        async def receive() -> dict[str, Any]:
            return next(messages)

        async def send(message: Mapping[str, Any]) -> None:
            sent.append(message["type"])

        await gateway.lifespan({"type": "lifespan"}, receive, send)
        assert sent == ["lifespan.shutdown.complete"] and request.cancelled()

    asyncio.run(test())
    assert done == ["request ended", "ledger stopped"]
