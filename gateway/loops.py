"""Requests that went round: a request whose hop header (appliance.hop_marker) names this appliance came back
to it (an endpoint of a deployment leads back here, directly or through another Hearth) and is refused before
anything else is done with it, so it is never relayed again nor billed twice; one that came through MAX_HOPS
Hearths already is refused too. A request through a chain of other Hearths is served, and the hop header it is
sent on with names them and this one.
"""

from collections.abc import Iterable

from appliance.hop_marker import HEADER, MAX_HOPS, marker, markers_in, onward
from gateway import errors

_HEADER = HEADER.encode()


def hops_onward(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The hop header to send the request with ``headers`` (ASGI's) on with: this appliance's marker after
    those it came through. Raises GatewayError 508 (gateway.errors.loop_detected) when they name this
    appliance, or (too_many_hops) when there are MAX_HOPS of them already."""
    came = [value for name, value in headers if name == _HEADER]
    if not came:
        return marker()
    value = b", ".join(came).decode("latin-1")
    markers = markers_in(value)
    if marker() in markers:
        raise errors.loop_detected()
    if len(markers) >= MAX_HOPS:
        raise errors.too_many_hops(len(markers))
    return onward(value)
