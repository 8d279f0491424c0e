"""Which replica serves a request: cache-aware first, then least loaded.

A replica that recently served the same prompt prefix likely still holds its KV blocks (vLLM's and
SGLang's prefix caches), so a request goes back to it, unless that replica already has AFFINITY_SLACK
more requests in flight than the least-loaded one; otherwise the least in-flight replica wins. The
order is also the retry order: the relay moves on only when a replica could not be reached, before a
byte went to the client.
"""

import hashlib
import json
from collections import Counter, OrderedDict
from typing import Any

from gateway.registry import Route, Upstream

PREFIX_CHARS = 2048  # of the rendered prompt: a system prompt and the start of a conversation
AFFINITY_SLACK = 4  # requests in flight beyond the least-loaded replica before affinity gives way
AFFINITY_ENTRIES = 10_000  # prefixes remembered (LRU)


def prefix_key(model: str, request: dict[str, Any]) -> bytes:
    """A digest of the request's prompt prefix: system, then messages (chat, Anthropic), prompt or input."""
    parts = [request.get("system"), request.get("messages"), request.get("prompt"), request.get("input")]
    rendered = json.dumps([p for p in parts if p is not None], ensure_ascii=False, default=str)[:PREFIX_CHARS]
    return hashlib.blake2b(f"{model}\0{rendered}".encode(), digest_size=16).digest()


class Router:
    """In-process routing state of one gateway process: in-flight counts and prefix affinity."""

    def __init__(self) -> None:
        self.in_flight: Counter[int] = Counter()
        self.served: Counter[int] = Counter()  # requests sent so far: breaks ties, so idle replicas take turns
        self.affinity: OrderedDict[bytes, int] = OrderedDict()

    def order(self, route: Route, key: bytes) -> list[Upstream]:
        """The route's replicas in the order to try them."""
        ranked = sorted(route.upstreams, key=lambda u: (self.in_flight[u.replica_id], self.served[u.replica_id]))
        preferred = self.affinity.get(key)
        least = self.in_flight[ranked[0].replica_id] if ranked else 0
        for i, upstream in enumerate(ranked):
            if upstream.replica_id == preferred and self.in_flight[preferred] - least < AFFINITY_SLACK:
                return [upstream, *ranked[:i], *ranked[i + 1 :]]
        return ranked

    def started(self, upstream: Upstream, key: bytes) -> None:
        """Count a request sent to ``upstream`` (call before sending, so concurrent choices see it); an empty
        ``key`` (a route with one replica) is remembered for no affinity."""
        self.in_flight[upstream.replica_id] += 1
        self.served[upstream.replica_id] += 1
        if not key:
            return
        self.affinity[key] = upstream.replica_id
        self.affinity.move_to_end(key)
        if len(self.affinity) > AFFINITY_ENTRIES:
            self.affinity.popitem(last=False)

    def finished(self, upstream: Upstream) -> None:
        self.in_flight[upstream.replica_id] -= 1
        if self.in_flight[upstream.replica_id] <= 0:
            del self.in_flight[upstream.replica_id]
