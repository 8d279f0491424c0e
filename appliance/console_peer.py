"""Who a forwarded console request came from: the private header the relay processes add and the console
process reads back.

The console process (appliance.console_asgi) listens only on a unix socket in a 0700 folder, so the
peer it sees is always a relay process. ``peer_header(scope)`` writes what uvicorn told the relay about the
client's connection (scheme, client and server address) into ``x-hearth-peer``; ``restore(scope)`` puts
them back into the console's scope, so Django's REMOTE_ADDR, ``is_secure()`` and the trusted-proxy rules
(appliance.transport_security) see the client exactly as they would in one process. The relay drops any
``x-hearth-peer`` a client sends (appliance.console_proxy), so nobody can claim another address with it.

Imports nothing of Hearth's.
"""

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

# The ASGI shapes both sides use (as gateway.asgi_io's, which appliance/ may not import).
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]

PEER_HEADER = b"x-hearth-peer"
_NONE = "-"


def _address(pair: Any) -> str:
    return f"{pair[0]} {pair[1]}" if pair else f"{_NONE} {_NONE}"


def peer_header(scope: Scope) -> tuple[bytes, bytes]:
    """The header for an ASGI http ``scope``: ``scheme client_host client_port server_host server_port``,
    ``-`` for an address uvicorn did not have (a unix socket's)."""
    value = f"{scope.get('scheme', 'http')} {_address(scope.get('client'))} {_address(scope.get('server'))}"
    return PEER_HEADER, value.encode("latin-1")


def _pair(host: str, port: str) -> tuple[str, int] | None:
    return None if host == _NONE or not port.isdigit() else (host, int(port))


def restore(scope: Scope) -> Scope:
    """A copy of ``scope`` with the scheme, client and server its ``x-hearth-peer`` header names, and the
    header removed; ``scope`` itself when it has none or one that does not parse (five fields)."""
    headers = scope.get("headers", [])
    value = next((v for k, v in headers if k == PEER_HEADER), None)
    fields = value.decode("latin-1").split(" ") if value is not None else []
    if len(fields) != 5 or fields[0] not in ("http", "https"):
        return scope
    return {
        **scope,
        "scheme": fields[0],
        "client": _pair(fields[1], fields[2]),
        "server": _pair(fields[3], fields[4]),
        "headers": [(k, v) for k, v in headers if k != PEER_HEADER],
    }
