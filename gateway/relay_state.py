"""What changes while one request is relayed (gateway.relay), read by the accounting of its end (gateway.ledger,
gateway.app) and by the modules that act on it meanwhile (gateway.holding, gateway.lanes)."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.answers import AnswerTally


@dataclass(slots=True)
class RelayState:
    """What changes while one request is relayed. The relay alone writes it, but ``client_gone`` (the watch on
    the client); gateway.app records the request from it and the plan."""

    tally: AnswerTally  # what the answer holds (gateway.answers)
    quiet_since: float  # monotonic seconds of the last bytes sent to the client (the engine's, or a keep-alive)
    asked_engine: bool = False  # the request went to an engine, which may have begun its prefill
    status: int = 0  # the answer's HTTP status (the engine's, or 200 once a held stream's head went out); 0: none yet
    streamed: int = 0  # bytes of the engine's stream handed to the client (keep-alives and the gateway's own end aside)
    at_boundary: bool = True  # the bytes sent so far end between two events: a keep-alive may go now
    ttft_seconds: float | None = None  # from the request's arrival until its first generated token went out
    token_chunks: int = 0  # events that carried generated tokens (gateway.sse.StreamWatcher)
    # while gateway.fast_forward relays the stream: token_chunks with the events it relayed so far (the notes of
    # gateway.ledger read it, so a process killed meanwhile is recorded with them); None otherwise
    live_token_chunks: Callable[[], int] | None = None
    usage: dict[str, Any] = field(default_factory=dict)  # the engine's usage object; {} when it sent none
    finish_reason: str | None = None
    truncated: bool = False  # the stream ended without its terminal event
    answered: bool = False  # the answer is complete: a client leaving now cancels nothing
    client_gone: bool = False  # the client left before its answer was complete
    woke_engine: bool = False  # held for its deployment's wake first (gateway.holding)
    wake_seconds: float | None = None  # how long it was held
    head_sent: bool = False  # a held stream's head went out while it waited: the engine's answer continues it
    error: str = ""  # why it failed, as its client was told: an error answered, or the error event ending a stream
