"""The Caddyfile of the HTTPS proxy Hearth ships (compose.yaml's ``tls`` profile; Debian's ``caddy`` in front of
`make up`), written by ``python manage.py caddyfile``. Valid for Caddy 2.6.2 (Debian bookworm's package) and the
image compose.yaml pins; the directives are those of Caddy's docs, "reverse_proxy" and "Global options", and of
its source, modules/caddyhttp/reverseproxy/caddyfile.go and caddyconfig/httpcaddyfile/serveroptions.go.

- **Certificates.** A public name gets one from Let's Encrypt or ZeroSSL (Caddy's automatic HTTPS: ports 80 and
  443 must reach it); a private one (appliance.public_name.is_private: a single label, an address, .lan, .internal,
  ...) from Caddy's own CA (``tls internal``), whose root certificate people's machines then trust
  (``<data dir>/caddy/pki/authorities/local/root.crt``). ``skip_install_trust``: Caddy never adds that root to
  the trust store of the machine it runs on.
- **Streaming.** ``flush_interval -1``: every chunk an engine sends is written to the client at once (Caddy
  flushes text/event-stream so by itself; this holds for any stream). No ``request_buffers`` or
  ``response_buffers``: Caddy buffers neither body unless they are set.
- **Timeouts, each longer than HEARTH_STREAM_IDLE_TIMEOUT** (by TIMEOUT_MARGIN), so that a silent stream is
  ended by Hearth, with its own error event naming the setting, never cut short by the proxy:
  the transport's ``read_timeout`` (the longest wait for the next byte from Hearth) and ``write_timeout``,
  ``response_header_timeout`` (a request that is not streamed answers only when the engine is done), and the
  server's ``idle`` timeout (a kept-alive connection between requests). The server's ``read_body`` and ``write``
  timeouts stay unset (none, Caddy's default): Go's http.Server applies them to the whole request or response
  (net/http, Server.ReadTimeout and WriteTimeout), so any value would cut a long answer that is not silent
  at all. ``read_header`` bounds how long a client may take to send its request's headers.
- Caddy adds X-Forwarded-For (the client's address) and X-Forwarded-Proto; Hearth believes them from the proxy's
  address only (HEARTH_TRUSTED_PROXIES, appliance.transport_security). HSTS and ``Secure`` cookies come from
  Hearth (Django's SecurityMiddleware), not from here.
- **Health.** A plain-HTTP site on 127.0.0.1:``health_port`` answers ``GET /healthz`` with 200 "ok": compose's
  health check for the caddy service asks it (the image has busybox's wget and no admin API, ``admin off``).

Imports nothing that reads Django's settings.
"""

import math
from dataclasses import dataclass

from appliance.public_name import is_private

TIMEOUT_MARGIN = 60  # seconds each proxy timeout exceeds HEARTH_STREAM_IDLE_TIMEOUT by
READ_HEADER_TIMEOUT = 30  # seconds a client may take to send its request's headers
DIAL_TIMEOUT = 10  # seconds to connect to Hearth (Caddy's default is 3)
HEALTH_PATH = "/healthz"  # what compose's health check asks on 127.0.0.1:health_port


@dataclass(frozen=True)
class Site:
    """What the Caddyfile is made from. ``hostname``: the name people use (HEARTH_HOSTNAME, as
    appliance.public_name.hostname reads it); ``upstream``: Hearth's web server, ``host:port``;
    ``stream_idle_timeout``: HEARTH_STREAM_IDLE_TIMEOUT, seconds; ``internal_ca``: certificates from Caddy's own
    CA (None: so for a private name, appliance.public_name.is_private); ``email``: the ACME account's address
    ("" none); ``https_port`` / ``http_port``: where Caddy listens (80 and 443 for automatic certificates);
    ``storage``: Caddy's data folder ("" its default: $XDG_DATA_HOME/caddy, /data/caddy in the image);
    ``health_port``: where the health site listens, on 127.0.0.1 only."""

    hostname: str
    upstream: str
    stream_idle_timeout: float
    internal_ca: bool | None = None
    email: str = ""
    https_port: int = 443
    http_port: int = 80
    storage: str = ""
    health_port: int = 2080

    @property
    def uses_internal_ca(self) -> bool:
        return is_private(self.hostname) if self.internal_ca is None else self.internal_ca

    @property
    def proxy_timeout(self) -> int:
        """Seconds of each streaming timeout: HEARTH_STREAM_IDLE_TIMEOUT rounded up, plus TIMEOUT_MARGIN."""
        return math.ceil(self.stream_idle_timeout) + TIMEOUT_MARGIN


def _quoted(value: str) -> str:
    """A Caddyfile token: as it is when plain, else in double quotes (Caddyfile's lexer, caddyconfig/caddyfile)."""
    if value and all(c.isalnum() or c in "-._/@:+[]" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _global_options(site: Site) -> list[str]:
    lines = ["{", "\tadmin off"]  # no admin API on :2019: the configuration is this file
    if site.uses_internal_ca:
        lines.append("\tskip_install_trust")
    if site.email:
        lines.append(f"\temail {_quoted(site.email)}")
    if site.http_port != 80:
        lines.append(f"\thttp_port {site.http_port}")
    if site.https_port != 443:
        lines.append(f"\thttps_port {site.https_port}")
    if site.storage:
        lines.append(f"\tstorage file_system {_quoted(site.storage)}")
    lines += [
        "\tservers {",
        "\t\ttimeouts {",
        f"\t\t\tread_header {READ_HEADER_TIMEOUT}s",
        f"\t\t\tidle {site.proxy_timeout}s",
        "\t\t}",
        "\t}",
        "}",
    ]
    return lines


def render(site: Site) -> str:
    """The Caddyfile for ``site``, as text. Raises ValueError for an empty hostname or upstream."""
    if not site.hostname or not site.upstream:
        raise ValueError("a Caddyfile needs HEARTH_HOSTNAME and the upstream (Hearth's host:port)")
    timeout = f"{site.proxy_timeout}s"
    site_address = site.hostname if site.https_port == 443 else f"{site.hostname}:{site.https_port}"
    lines = [
        "# Written by `python manage.py caddyfile` (appliance.caddyfile): make it again rather than edit it.",
        *_global_options(site),
        "",
        f"{_quoted(site_address)} {{",
        *(["\ttls internal"] if site.uses_internal_ca else []),
        f"\treverse_proxy {_quoted(site.upstream)} {{",
        "\t\tflush_interval -1",
        "\t\ttransport http {",
        f"\t\t\tdial_timeout {DIAL_TIMEOUT}s",
        f"\t\t\tresponse_header_timeout {timeout}",
        f"\t\t\tread_timeout {timeout}",
        f"\t\t\twrite_timeout {timeout}",
        "\t\t}",
        "\t}",
        "}",
        "",
        f"http://127.0.0.1:{site.health_port} {{",
        "\tbind 127.0.0.1",
        f'\trespond {HEALTH_PATH} "ok" 200',
        "}",
    ]
    return "\n".join(lines) + "\n"
