"""Asking an endpoint Hearth did not launch what it serves: its /v1/models list (the test of OpenAI
compatibility, at registration and at every health check) and its version (engines.external.VERSION_PATHS).

Every connection goes through the address policy first (appliance.address_policy): the host is resolved at that
moment, every address it resolves to judged, and the connection made to the addresses judged (so a name cannot
resolve to one address for the check and another for the connection), never through a proxy of the environment.

Every failure is an EndpointError in words for the admin: "refused by the address policy" and why; "not
reachable", the same words whether the port is closed, filtered, silent or speaks something other than HTTP (the
registration is no port scanner); a host that does not resolve; a certificate that does not verify (certificates
are checked against the system's CAs, as the gateway checks them); a refused key; an answer that is not OpenAI's
model list; this Hearth itself (every probe carries the hop header, appliance.hop_marker, and this Hearth's
gateway refuses a request with its own marker with 508). The engine key goes only in the Authorization header,
never into a message or a log line.
"""

import functools
import logging
import ssl
from urllib.parse import urlsplit, urlunsplit

import httpx

from appliance import address_policy, hop_marker
from console.errors import ConsoleError
from engines.external import VERSION_PATHS, ExternalKind, Listed, models_listed, version_in

log = logging.getLogger(__name__)
REGISTER_TIMEOUT = 5.0  # seconds each request of a registration may take
CHECK_TIMEOUT = 3.0  # seconds a health check may take: under reconcile's period, which runs them in parallel


class EndpointError(ConsoleError):
    """The endpoint cannot be served: the message says why, in words for the admin."""


class AddressRefused(EndpointError):
    """The address policy refuses the endpoint's host and port: nothing was sent there."""


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings for https endpoints: the system's CAs, hostnames checked (the gateway uses the same)."""
    return ssl.create_default_context()


def _headers(api_key: str) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return {hop_marker.HEADER: hop_marker.marker(), **auth}


def _where(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def admitted(base_url: str) -> address_policy.Verdict:
    """The address policy's verdict on ``base_url``'s host and port as it resolves now. Raises AddressRefused
    (the policy's reason), EndpointError for a host that is no host name or does not resolve."""
    host, port = _where(base_url)
    try:
        verdict = address_policy.check(address_policy.current(), host, port)
    except ValueError as exc:  # not a host name, or HEARTH_EXTERNAL_ALLOW is not networks
        raise EndpointError(f"{base_url} is refused: {exc}.") from None
    except OSError:  # socket.gaierror
        raise EndpointError(f"{base_url} is not reachable: the host {host} does not resolve.") from None
    if verdict.refused:
        raise AddressRefused(
            f"{base_url} is refused by the address policy: {verdict.refused}. Hearth sends nothing there; "
            "HEARTH_EXTERNAL_ALLOW can allow a network (never this appliance's, its database's or Redis's port)."
        )
    return verdict


def _unreachable(base_url: str, timeout: float) -> EndpointError:
    return EndpointError(
        f"{base_url} is not reachable: no HTTP answer within {timeout:g} s. Check the host and port, http:// or "
        "https://, that the server runs, and that no firewall stands between it and this box."
    )


def _in_chain(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def get(url: str, api_key: str, timeout: float) -> httpx.Response:
    """``GET url`` (under an endpoint's base URL) with its engine key, connected only to the addresses the policy
    admits now, each in turn until one connects. Raises EndpointError (AddressRefused) as ``admitted`` does, or
    when no address gives an HTTP answer; a certificate that fails to verify is named (its server answered)."""
    parts = urlsplit(url)
    host, port = _where(url)
    base = f"{parts.scheme}://{parts.netloc}"
    verdict = admitted(base)
    wire = address_policy.ascii_host(host)
    headers = {**_headers(api_key), "Host": wire if parts.port is None else f"{wire}:{port}"}
    named = address_policy.ip_of(host) is None
    with httpx.Client(verify=tls_context(), timeout=timeout, trust_env=False) as client:
        for address in verdict.addresses:
            netloc = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
            try:
                return client.get(
                    urlunsplit(parts._replace(netloc=netloc)),
                    headers=headers,
                    extensions={"sni_hostname": wire} if named else {},
                )
            except httpx.HTTPError as exc:
                if tls := _in_chain(exc, ssl.SSLCertVerificationError):
                    why = getattr(tls, "verify_message", "") or str(tls)
                    raise EndpointError(
                        f"The TLS handshake with {base} failed: {why}. Hearth checks https endpoints' certificates "
                        "against the system's CAs (an internal CA must be added to them)."
                    ) from None
                log.info("GET %s at %s: %s", url, address, type(exc).__name__)  # the admin's box log only
    raise _unreachable(base, timeout)


def list_models(base_url: str, api_key: str = "", timeout: float | None = None) -> list[Listed]:
    """The models ``GET {base_url}/v1/models`` lists (``timeout`` default REGISTER_TIMEOUT). Raises EndpointError
    when it cannot be read."""
    resp = get(f"{base_url}/v1/models", api_key, timeout or REGISTER_TIMEOUT)
    if resp.status_code == 508:  # Loop Detected: our own hop marker came back (gateway.loops)
        raise EndpointError(
            f"{base_url} is this Hearth itself: it refused the request as one that came back to it. An endpoint "
            "must be an engine (or another Hearth), never this one."
        )
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


def read_version(kind: str, base_url: str, api_key: str = "", timeout: float | None = None) -> str:
    """The version the engine tells at its kind's VERSION_PATHS, "" when it tells none (or does not answer)."""
    for path in VERSION_PATHS[ExternalKind(kind)]:
        try:
            resp = get(f"{base_url}{path}", api_key, timeout or REGISTER_TIMEOUT)
            if resp.status_code == 200 and (version := version_in(kind, resp.json())):
                return version  # the body itself is never logged: SGLang's echoes its API key
        except (EndpointError, ValueError):
            continue
    return ""
