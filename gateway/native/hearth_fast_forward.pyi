"""Types of the extension gateway/native/fast_forward.c builds (setup.py); gateway/fast_forward.py uses it."""

from collections.abc import Callable

NOT_PLAIN: int
ENGINE_CLOSED: int
CLIENT_EVENT: int
CLIENT_SLOW: int
TAKEN: int

def plain_events(data: bytes, /) -> int: ...

class Stream:
    engine_fd: int
    client_fd: int
    def __init__(self, engine_fd: int, client_fd: int, on_end: Callable[[], None]) -> None: ...
    def pump(self) -> None: ...
    def client_event(self) -> None: ...
    def seen(self) -> tuple[int, int, float, float]: ...
    def take(self) -> tuple[int, bytes, bytes, int, int, float, float] | None: ...
