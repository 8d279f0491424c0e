"""TLS seen through a reverse proxy, and cookies that follow it.

``TrustedProxyMiddleware``: when the peer is one of HEARTH_TRUSTED_PROXIES, its ``X-Forwarded-Proto`` says
whether the client used TLS and the last address of its ``X-Forwarded-For`` is the client's (the one the
proxy itself added, MDN "X-Forwarded-For", security and privacy concerns); from any other peer both
headers are dropped, so nobody can claim TLS or another address by sending them.

``SecureCookiesMiddleware``: on a secure request (TLS directly, or so by a trusted proxy) every cookie
set is ``Secure``; Django's SecurityMiddleware sends HSTS on those same requests. It must come right after
``TrustedProxyMiddleware`` in MIDDLEWARE, so that it sees the response after every other middleware set its
cookies (the session's, CSRF's, the flash messages'); last in the list, it ran before them and the session
cookie went out without ``Secure``.
"""

import ipaddress
from collections.abc import Callable
from functools import cache

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@cache
def trusted_networks(proxies: tuple[str, ...]) -> tuple[Network, ...]:
    """HEARTH_TRUSTED_PROXIES as networks (an address is a /32 or /128). Raises ValueError naming a bad one."""
    try:
        return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)
    except ValueError as exc:
        raise ValueError(f"HEARTH_TRUSTED_PROXIES: {exc}") from None


def is_trusted(address: str) -> bool:
    try:
        peer = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(peer in net for net in trusted_networks(tuple(settings.HEARTH_TRUSTED_PROXIES)))


class TrustedProxyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        meta = request.META
        proto = meta.pop("HTTP_X_FORWARDED_PROTO", "")
        forwarded_for = meta.pop("HTTP_X_FORWARDED_FOR", "")
        if is_trusted(meta.get("REMOTE_ADDR", "")):
            # the value the trusted proxy appended, which Django's SECURE_PROXY_SSL_HEADER then reads
            meta["HTTP_X_FORWARDED_PROTO"] = proto.split(",")[-1].strip().lower()
            if client := forwarded_for.split(",")[-1].strip():
                meta["REMOTE_ADDR"] = client
        return self.get_response(request)


class SecureCookiesMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if request.is_secure():
            for morsel in response.cookies.values():
                morsel["secure"] = True
        return response
