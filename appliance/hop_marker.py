"""Which Hearth a request came through: the hop header every request Hearth sends an engine or an endpoint
carries (the gateway's relay, gateway.upstream; the console's probes, console.deployments.probing), so that a
request that comes back to the Hearth that sent it is refused at once (gateway.loops) instead of going round.

The header, ``x-hearth-hop``, lists the markers of the Hearths the request passed through, comma-separated,
the first one first. A marker names an appliance, not a process: its web processes share SECRET_KEY and
HEARTH_INSTANCE and so their marker. It is an HMAC of HEARTH_INSTANCE under SECRET_KEY, so it tells an
endpoint nothing of either (HEARTH_INSTANCE is made from DATABASE_URL, which may hold a password).
"""

import functools
import hashlib
import hmac
import re

from django.conf import settings

HEADER = "x-hearth-hop"
MAX_HOPS = 4  # Hearths a request may already have passed through: a fifth one refuses it
MARKER = re.compile(r"[0-9a-f]{16}")  # what a marker looks like; anything else in the header is ignored


@functools.cache
def marker() -> str:
    """This appliance's marker: 16 hex digits, the same in each of its processes."""
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, f"hearth-hop:{settings.HEARTH_INSTANCE}".encode(), hashlib.sha256).hexdigest()[:16]


def markers_in(value: str) -> list[str]:
    """The markers a hop header's ``value`` lists, in order ("a, b" → ["a", "b"]); what is not one is left out."""
    return [part for part in (p.strip() for p in value.split(",")) if MARKER.fullmatch(part)]


def onward(value: str) -> str:
    """The hop header to send on for a request that came with ``value`` ("" when none): its markers and this
    appliance's last."""
    return ", ".join([*markers_in(value), marker()])
