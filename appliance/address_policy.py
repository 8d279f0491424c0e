"""Where Hearth may connect for an engine it did not launch: never back into this box or into the services it
stands on. Asked at registration and before every connection to a registered endpoint (health checks, scrapes:
console.deployments.probing; the gateway's relay at connect time), with the name resolved again each time.

Refused by default (``judge``), by the address every form of the host reaches:
- loopback (127.0.0.0/8, ::1), "this host" (0.0.0.0/8, ::) and IPv4-compatible IPv6 (::/96);
- link-local (169.254.0.0/16, with the cloud metadata address 169.254.169.254; fe80::/10) and the metadata
  addresses outside it (AWS's fd00:ec2::254, Alibaba's 100.100.100.200);
- multicast (224.0.0.0/4, ff00::/8) and reserved 240.0.0.0/4 (the broadcast address in it);
- the appliance's own port (HEARTH_PORT, and HEARTH_GATEWAY_URL's), its database's and Redis's, each on the
  addresses of the host it is reached at and on every address of this box (one it can bind).
Private ranges (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7) are allowed: a team's other GPU servers
live there. HEARTH_EXTERNAL_ALLOW (networks, comma-separated) lifts the range rules for what it covers, never
the port rules; each address it lets through is named in the verdict (the registration's audit entry).

An IPv4 address in any numeric form the C library reads (inet_aton: decimal 2130706433, octal 0177.0.0.1, hex
0x7f.1, short 127.1) is that address, an IPv4-mapped IPv6 one (::ffff:127.0.0.1) its IPv4 address, and a name
every address ``socket.getaddrinfo`` answers for it: one refused answer refuses the name.
"""

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_N = ipaddress.ip_network
REFUSED_RANGES: tuple[tuple[Network, str], ...] = (  # the first that holds an address names why
    (_N("127.0.0.0/8"), "loopback (127.0.0.0/8): this box itself"),
    (_N("0.0.0.0/8"), "'this host' (0.0.0.0/8), which reaches this box"),
    (_N("169.254.0.0/16"), "link-local (169.254.0.0/16), the cloud metadata address among them"),
    (_N("100.100.100.200/32"), "a cloud metadata address"),
    (_N("224.0.0.0/4"), "multicast (224.0.0.0/4)"),
    (_N("240.0.0.0/4"), "reserved (240.0.0.0/4, the broadcast address among them)"),
    (_N("::1/128"), "loopback (::1): this box itself"),
    (_N("::/128"), "the unspecified address (::), which reaches this box"),
    (_N("::/96"), "IPv4-compatible IPv6 (::/96)"),
    (_N("fe80::/10"), "link-local (fe80::/10)"),
    (_N("fd00:ec2::254/128"), "a cloud metadata address"),
    (_N("ff00::/8"), "multicast (ff00::/8)"),
)
_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?")


def _ipv4_part(text: str) -> int | None:
    """One part of a numeric IPv4 address as inet_aton reads it: 0x hex, 0-led octal, else decimal."""
    if re.fullmatch(r"0[xX][0-9a-fA-F]*", text):
        return int(text[2:] or "0", 16)
    if re.fullmatch(r"0[0-7]+", text):
        return int(text, 8)
    return int(text) if re.fullmatch(r"[1-9][0-9]*|0", text) else None


def ipv4_of(text: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address ``text`` is in any numeric form inet_aton reads (1 to 4 dot-separated parts, each
    decimal, octal or hex, the last filling the bytes left); None when it is not one (a name)."""
    parts = text.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # a trailing dot: "127.0.0.1." is the same address
    numbers = [_ipv4_part(p) for p in parts]
    if not 1 <= len(numbers) <= 4 or any(n is None for n in numbers):
        return None
    *leading, last = [n for n in numbers if n is not None]
    if any(n > 255 for n in leading) or last >= 256 ** (4 - len(leading)):
        return None
    value = last
    for index, byte in enumerate(leading):
        value += byte << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def canonical(address: IPAddress) -> IPAddress:
    """An IPv4-mapped IPv6 address as its IPv4 address; any other as it is."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def ip_of(host: str) -> IPAddress | None:
    """The address ``host`` (a URL's host, brackets stripped or not) is when it is numeric, canonical; None
    for a name."""
    host = host.strip("[]")
    try:
        return canonical(ipaddress.ip_address(host))
    except ValueError:
        return ipv4_of(host)


def ascii_host(host: str) -> str:
    """``host`` as it goes on the wire (an international name in IDNA). Raises ValueError, in words for the
    admin, for what is not a host name: over 253 characters, a label over 63 or empty, characters a name
    cannot hold."""
    if ip_of(host) is not None:
        return host
    try:
        wire = host.encode("idna").decode("ascii")
    except UnicodeError:
        wire = ""
    labels = wire.rstrip(".").split(".")
    if not wire or len(wire) > 253 or not all(len(label) <= 63 and _LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{host[:80]!r}{'…' if len(host) > 80 else ''} is not a host name")
    return wire


def bound_here(address: IPAddress) -> bool:
    """Whether ``address`` is one of this box's: a socket can be bound to it (a box that lets any address be
    bound, net.ipv4.ip_nonlocal_bind, counts every one as its own)."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((str(address), 0))
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Guarded:
    """A port that is never an engine's: ``what`` listens there, on ``addresses`` and on this box's own."""

    port: int
    what: str
    addresses: frozenset[IPAddress] = frozenset()


@dataclass(frozen=True)
class Policy:
    """``allow``: networks whose addresses the range rules let through (HEARTH_EXTERNAL_ALLOW); ``guarded``:
    the ports refused whatever the network; ``is_local`` tells this box's own addresses."""

    allow: tuple[Network, ...] = ()
    guarded: tuple[Guarded, ...] = ()
    is_local: Callable[[IPAddress], bool] = field(default=bound_here, compare=False)


@dataclass(frozen=True)
class Verdict:
    """``refused``: why not, in words ("" when allowed); ``addresses``: those judged, canonical, in the order
    to connect to them; ``allowed_by``: each address a range rule refuses that HEARTH_EXTERNAL_ALLOW let
    through, with the rule and the network ("127.0.0.1 (loopback …) by 127.0.0.0/8")."""

    refused: str = ""
    addresses: tuple[IPAddress, ...] = ()
    allowed_by: tuple[str, ...] = ()


def range_rule(address: IPAddress) -> str:
    """Why a range rule refuses ``address`` (canonical), "" when none does."""
    return next((why for net, why in REFUSED_RANGES if address in net), "")


def judge(policy: Policy, host: str, port: int, addresses: Iterable[str | IPAddress]) -> Verdict:
    """The verdict on connecting to ``host``:``port`` at ``addresses`` (what ``host`` resolved to; numeric
    strings in any form ``ip_of`` reads). No address is a refusal."""
    seen: list[IPAddress] = []
    for raw in addresses:
        address = ip_of(raw) if isinstance(raw, str) else canonical(raw)
        if address is None:
            return Verdict(f"{host} resolved to {raw!r}, which is not an address")
        if address not in seen:
            seen.append(address)
    if not seen:
        return Verdict(f"{host} resolves to no address")
    allowed_by = []
    for address in seen:
        named = f"{host} is {address}, " if str(address) != host else f"{address} is "
        for guard in policy.guarded:
            if port == guard.port and (address in guard.addresses or policy.is_local(address)):
                where = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
                return Verdict(f"{where} is {guard.what}")
        if why := range_rule(address):
            net = next((n for n in policy.allow if address.version == n.version and address in n), None)
            if net is None:
                return Verdict(named + why)
            allowed_by.append(f"{address} ({why}) by {net}")
    return Verdict("", tuple(seen), tuple(allowed_by))


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` stands for, canonical, in getaddrinfo's order (a numeric host: itself). Raises
    ValueError when it is not a host name, OSError (socket.gaierror) when it does not resolve."""
    if (numeric := ip_of(host)) is not None:
        return [numeric]
    answers = socket.getaddrinfo(ascii_host(host), port, type=socket.SOCK_STREAM)
    found = [ip_of(str(sockaddr[0])) for *_, sockaddr in answers]
    return [a for a in found if a is not None]


def check(policy: Policy, host: str, port: int) -> Verdict:
    """``judge`` on what ``host`` resolves to now. Raises as ``resolve`` does."""
    return judge(policy, host, port, resolve(host, port))


def allowed_networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """HEARTH_EXTERNAL_ALLOW's entries as networks (an address is a /32 or /128). Raises ValueError naming a
    bad one."""
    try:
        return tuple(ipaddress.ip_network(e.strip(), strict=False) for e in entries)
    except ValueError as exc:
        raise ValueError(f"HEARTH_EXTERNAL_ALLOW: {exc}") from None


def _quietly_resolved(host: str | None) -> frozenset[IPAddress]:
    try:
        return frozenset(resolve(host or "localhost", 0))
    except (OSError, ValueError):  # a unix socket's path, a name this box cannot resolve: this box's rule stays
        return frozenset()


def current() -> Policy:
    """The policy under the settings in force: HEARTH_EXTERNAL_ALLOW; the appliance's ports (HEARTH_PORT and
    HEARTH_GATEWAY_URL's), its database's (DATABASES, PostgreSQL's 5432 unless set; none for SQLite) and
    Redis's (REDIS_URL, 6379 unless set), each at its host's addresses, resolved now. Raises ValueError for a
    bad HEARTH_EXTERNAL_ALLOW (appliance.system_checks names it at start)."""
    gateway = urlsplit(settings.HEARTH_GATEWAY_URL)
    own = _quietly_resolved(gateway.hostname)
    gateway_port = gateway.port or (443 if gateway.scheme == "https" else 80)
    guarded = [Guarded(p, "this appliance itself", own) for p in sorted({settings.HEARTH_PORT, gateway_port})]
    database = settings.DATABASES["default"]
    if "sqlite" not in database["ENGINE"]:
        port = int(database.get("PORT") or 5432)
        guarded.append(Guarded(port, "this appliance's database", _quietly_resolved(database.get("HOST"))))
    redis = urlsplit(settings.REDIS_URL)
    if redis.scheme in ("redis", "rediss"):
        guarded.append(Guarded(redis.port or 6379, "this appliance's Redis", _quietly_resolved(redis.hostname)))
    return Policy(allowed_networks(settings.HEARTH_EXTERNAL_ALLOW), tuple(guarded))
