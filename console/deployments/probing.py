"""Asking an endpoint Hearth did not launch what it serves: its /v1/models list (the test of OpenAI
compatibility, at registration and at every health check) and its version (engines.external.VERSION_PATHS).

Every failure is an EndpointError whose words say what went wrong and what to check: a refused connection, a
host that does not resolve, a TLS handshake that failed (certificates are checked against the system's CAs, as
the gateway checks them), silence, an answer that is not HTTP, a refused key, an answer that is not OpenAI's
model list. The engine key goes only in the Authorization header, never into a message or a log line.
"""

import functools
import socket
import ssl
from urllib.parse import urlsplit

import httpx

from console.errors import ConsoleError
from engines.external import VERSION_PATHS, ExternalKind, Listed, models_listed, version_in

REGISTER_TIMEOUT = 5.0  # seconds each request of a registration may take
CHECK_TIMEOUT = 3.0  # seconds a health check may take: under reconcile's period, which runs them in parallel


class EndpointError(ConsoleError):
    """The endpoint cannot be served: the message says why, in words for the admin."""


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings for https endpoints: the system's CAs, hostnames checked (the gateway uses the same)."""
    return ssl.create_default_context()


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _in_chain(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _transport_words(exc: httpx.TransportError, base_url: str, timeout: float) -> str:
    parts = urlsplit(base_url)
    where = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
    if isinstance(exc, httpx.TimeoutException):
        return f"{base_url} did not answer within {timeout:g} s (a firewall, or a server too busy to answer)."
    if tls := _in_chain(exc, ssl.SSLError):
        why = getattr(tls, "verify_message", "") or getattr(tls, "reason", "") or str(tls)
        return (
            f"The TLS handshake with {where} failed: {why}. Hearth checks https endpoints' certificates against "
            "the system's CAs (an internal CA must be added to them); is it an http:// server?"
        )
    if _in_chain(exc, ConnectionRefusedError):
        return f"Nothing answers at {where}: the connection was refused. Is the engine running and listening there?"
    if _in_chain(exc, socket.gaierror):
        return f"The host {parts.hostname} does not resolve: check its name."
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return f"{where} did not answer HTTP (an https server asked with http://?): {exc or type(exc).__name__}."
    return f"Cannot reach {where}: {exc or type(exc).__name__}."


def list_models(base_url: str, api_key: str = "", timeout: float = REGISTER_TIMEOUT) -> list[Listed]:
    """The models ``GET {base_url}/v1/models`` lists. Raises EndpointError when it cannot be read."""
    try:
        resp = httpx.get(f"{base_url}/v1/models", headers=_headers(api_key), timeout=timeout, verify=tls_context())
    except httpx.TransportError as exc:
        raise EndpointError(_transport_words(exc, base_url, timeout)) from None
    except httpx.HTTPError as exc:
        raise EndpointError(f"Cannot ask {base_url}: {exc}.") from None
    if resp.status_code in (401, 403):
        what = "refused the engine API key given" if api_key else "demands an engine API key: give it"
        raise EndpointError(f"{base_url} {what} (GET /v1/models answered HTTP {resp.status_code}).")
    if resp.status_code != 200:
        raise EndpointError(
            f"{base_url} answers, but is not an OpenAI-compatible server: GET /v1/models answered HTTP "
            f"{resp.status_code}. Give the server's base URL (its OpenAI API is below /v1)."
        )
    try:
        return models_listed(resp.json())
    except ValueError as exc:  # not JSON (a web page), or JSON of another shape
        raise EndpointError(f"{base_url} answers, but is not an OpenAI-compatible server: {exc}.") from None


def read_version(kind: str, base_url: str, api_key: str = "", timeout: float = REGISTER_TIMEOUT) -> str:
    """The version the engine tells at its kind's VERSION_PATHS, "" when it tells none (or does not answer)."""
    for path in VERSION_PATHS[ExternalKind(kind)]:
        try:
            resp = httpx.get(f"{base_url}{path}", headers=_headers(api_key), timeout=timeout, verify=tls_context())
            if resp.status_code == 200 and (version := version_in(kind, resp.json())):
                return version  # the body itself is never logged: SGLang's echoes its API key
        except (httpx.HTTPError, ValueError):
            continue
    return ""
