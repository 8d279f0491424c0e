"""A weighted fair queue on tokens between API keys (gateway.lanes holds one per deployment and class).

Self-clocked fair queueing (Golestani, 1994): each entry gets a virtual finish time, its key's previous finish time
or the queue's clock, whichever is later, plus its cost (the tokens it may take: its prompt estimate plus the most
it may generate) divided by its key's weight; the entry with the earliest finish time goes first, and the clock
moves to the finish time of the entry that went. So a key with 200 requests queued has finish times 200 costs
deep, and another key's single request, queued later, finishes after one cost and goes next: each key gets an equal
share of tokens whatever its number of requests, and a key's burst cannot starve another key. Equal finish times go
in the order they came. Pure: no I/O, no clock.
"""

import heapq
import itertools
from dataclasses import dataclass, field


@dataclass(order=True)
class Entry[T]:
    """One queued item: ordered by its virtual finish time, then by arrival; ``gone`` once taken out."""

    finish: float
    order: int
    item: T = field(compare=False)
    gone: bool = field(default=False, compare=False)


class FairQueue[T]:
    """Items of several keys, taken out in weighted-fair order of their token costs (module docstring)."""

    def __init__(self) -> None:
        self._heap: list[Entry[T]] = []
        self._last: dict[object, float] = {}  # key → the finish time of its latest entry
        self._clock = 0.0  # the finish time of the entry that went last
        self._order = itertools.count()
        self._live = 0

    def __len__(self) -> int:
        return self._live

    def push(self, key: object, cost: float, item: T, weight: float = 1.0) -> Entry[T]:
        """Queue ``item`` of ``key`` costing ``cost`` tokens (at least 1) at ``weight`` (over 0); its entry, for
        ``remove``."""
        start = max(self._clock, self._last.get(key, 0.0))
        entry = Entry(start + max(cost, 1.0) / weight, next(self._order), item)
        self._last[key] = entry.finish
        heapq.heappush(self._heap, entry)
        self._live += 1
        return entry

    def pop(self) -> T | None:
        """The item to go next, taken out; None when the queue is empty."""
        while self._heap:
            entry = heapq.heappop(self._heap)
            if not entry.gone:
                entry.gone = True
                self._live -= 1
                self._clock = entry.finish
                self._forget()
                return entry.item
        return None

    def remove(self, entry: Entry[T]) -> None:
        """Take ``entry`` out (its client left, or waited too long); its key keeps the finish time it was given."""
        if not entry.gone:
            entry.gone = True
            self._live -= 1
            self._forget()

    def _forget(self) -> None:
        """Drop the keys whose latest finish time the clock has passed (a newcomer starts at the clock anyway)."""
        if not self._live:
            self._heap.clear()
        if len(self._last) > 2 * self._live + 16:
            self._last = {k: f for k, f in self._last.items() if f > self._clock}
