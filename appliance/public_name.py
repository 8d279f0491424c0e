"""What the name people reach Hearth by over HTTPS (HEARTH_HOSTNAME) implies for the settings a user otherwise sets
by hand: the Host header Django accepts (ALLOWED_HOSTS), the origin its CSRF check trusts (CSRF_TRUSTED_ORIGINS),
the proxy whose X-Forwarded-* it believes (HEARTH_TRUSTED_PROXIES), and how the proxy Hearth ships (Caddy,
appliance.caddyfile) gets its certificate. Each applies only where the setting itself is not given.

appliance.settings calls it while it is read, so nothing here reads Django's settings.
"""

import ipaddress

from appliance.address_policy import ascii_host

# Where the proxy is when HEARTH_HOSTNAME is set and HEARTH_TRUSTED_PROXIES is not: on this box (Debian's caddy in
# front of `make up`). compose.yaml's tls profile names its Caddy container's address instead.
LOCAL_PROXIES = ("127.0.0.1", "::1")

# Names no public certificate authority issues for (RFC 6761 special-use names, RFC 8375's home.arpa, the mDNS
# .local, and the .internal top-level domain ICANN reserved for private use in 2024): Caddy's own CA signs them.
PRIVATE_SUFFIXES = (".localhost", ".local", ".lan", ".home.arpa", ".internal", ".test", ".example", ".invalid")


def hostname(raw: str) -> str:
    """HEARTH_HOSTNAME as it goes on the wire: stripped, lower case, IDNA for an international name, no trailing
    dot; "" when unset. Raises ValueError naming the variable for what is not a host name (a URL, a port, a
    path, an IPv6 address): the start stops with it."""
    name = raw.strip().lower().rstrip(".")
    if not name:
        return ""
    if "/" in name or ":" in name:
        raise ValueError(f"HEARTH_HOSTNAME={raw!r} is a host name only, without scheme, port or path")
    try:
        return ascii_host(name)
    except ValueError as exc:
        raise ValueError(f"HEARTH_HOSTNAME: {exc}") from None


def allowed_hosts(name: str, defaults: list[str]) -> list[str]:
    """ALLOWED_HOSTS when it is not set: ``defaults`` (this machine by name and loopback) and ``name``."""
    return [*defaults, name] if name and name not in defaults else list(defaults)


def trusted_origins(name: str) -> list[str]:
    """CSRF_TRUSTED_ORIGINS when it is not set: the HTTPS origin of ``name`` (none without one)."""
    return [f"https://{name}"] if name else []


def trusted_proxies(name: str) -> list[str]:
    """HEARTH_TRUSTED_PROXIES when it is not set: this box's loopback addresses once ``name`` says a proxy is in
    front (none without one, so nobody's X-Forwarded-Proto is believed)."""
    return list(LOCAL_PROXIES) if name else []


def is_private(name: str) -> bool:
    """Whether ``name`` is one no public CA signs: an address, a single label ("gpu-box"), or under one of
    PRIVATE_SUFFIXES. Caddy then serves it from its internal CA (``tls internal``) instead of asking Let's
    Encrypt or ZeroSSL, which would fail."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    return "." not in name or name == "localhost" or name.endswith(PRIVATE_SUFFIXES)
