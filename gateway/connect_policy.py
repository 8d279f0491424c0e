"""The address policy (appliance.address_policy) at the moment the relay connects to an endpoint Hearth did not
launch: its host is resolved and judged again, and the connection made only to the addresses judged, so a name
that resolves to a refused address later (this box, its database, the metadata address) is refused then, not
only at registration or at the next health check.

Kept lean for the relay: a kept-alive connection asks nothing (gateway.upstream); a new one asks ``AddressGate``,
which keeps each host and port's verdict TTL seconds, so a burst of new connections resolves once. Resolving
and judging (getaddrinfo, and a socket bound to tell this box's own addresses) run in a thread, off the event
loop.
"""

import asyncio
import logging
import time
from collections.abc import Callable

from appliance import address_policy
from gateway.upstream_errors import UpstreamRefused, UpstreamUnreachable

log = logging.getLogger(__name__)
TTL = 5.0  # seconds a host's verdict is kept


class AddressGate:
    """``await gate(host, port)``: the addresses the relay may connect to for ``host``:``port`` now, in order
    (gateway.upstream.Admit). Raises UpstreamRefused with the policy's words, or UpstreamUnreachable when the
    host does not resolve (not kept: the next connection asks again)."""

    def __init__(
        self,
        policy: Callable[[], address_policy.Policy] = address_policy.current,
        ttl: float = TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy, self.ttl, self.clock = policy, ttl, clock
        self._known: dict[tuple[str, int], tuple[float, tuple[str, ...], str]] = {}  # until, addresses, refusal

    async def __call__(self, host: str, port: int) -> tuple[str, ...]:
        known = self._known.get((host, port))
        if known is None or known[0] <= self.clock():
            addresses, refused = await asyncio.to_thread(self._judge, host, port)
            known = self._known[(host, port)] = (self.clock() + self.ttl, addresses, refused)
            if refused:
                log.warning("the address policy refuses %s:%s now: %s", host, port, refused)
        if known[2]:
            raise UpstreamRefused(known[2])
        return known[1]

    def _judge(self, host: str, port: int) -> tuple[tuple[str, ...], str]:
        """(addresses, "") when admitted, ((), why) when refused."""
        try:
            verdict = address_policy.check(self.policy(), host, port)
        except ValueError as exc:  # not a host name
            return (), str(exc)
        except OSError as exc:  # socket.gaierror
            raise UpstreamUnreachable(f"{host} does not resolve: {exc}") from None
        return tuple(str(a) for a in verdict.addresses), verdict.refused
