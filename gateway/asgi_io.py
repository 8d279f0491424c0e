"""The ASGI shapes the gateway's modules share (scope, receive, send), its one way to answer JSON, and a way
to send outside a task (``send_now``)."""

from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from types import CoroutineType
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]


async def send_json(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """A whole JSON answer: ``body`` already encoded, ``headers`` beside its content type."""
    all_headers = [(b"content-type", b"application/json"), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})


def send_now(send: Send, message: Mapping[str, Any]) -> "PendingSend | None":
    """Run ``send(message)`` as far as it goes without waiting, outside any task (the relay's fast path,
    gateway.relay): None when it finished so, else an awaitable of the rest, for a task to await. A server's
    ``send`` waits only when the client reads slower than it is sent to (uvicorn's flow control)."""
    awaitable = send(message)
    sending = awaitable if isinstance(awaitable, CoroutineType) else _awaited(awaitable)  # not the slower ABC
    try:
        waiting_on = sending.send(None)
    except StopIteration:
        return None
    return PendingSend(sending, waiting_on)


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable


class PendingSend:
    """The rest of a coroutine started by hand that is waiting on ``waiting_on`` (what it yielded): awaiting
    this yields that to the awaiting task, then carries on as ``await`` would have (``yield from``)."""

    def __init__(self, coroutine: Coroutine[Any, Any, None], waiting_on: Any) -> None:
        self.coroutine, self.waiting_on = coroutine, waiting_on

    def __await__(self) -> Generator[Any, Any, None]:
        coroutine, waiting_on = self.coroutine, self.waiting_on
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # a cancellation of the awaiting task, passed on
                try:
                    waiting_on = coroutine.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    waiting_on = coroutine.send(sent)
                except StopIteration:
                    return

    def close(self) -> None:
        """When it will never be awaited: the send is abandoned where it waits."""
        self.coroutine.close()
