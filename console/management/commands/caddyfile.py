"""``manage.py caddyfile``: the Caddyfile of the HTTPS proxy in front of Hearth (appliance.caddyfile says what is in
it and why), for HEARTH_HOSTNAME, HEARTH_TLS_CA, HEARTH_ACME_EMAIL and HEARTH_STREAM_IDLE_TIMEOUT as set. Written to
stdout, or to --output (compose.yaml's ``caddyfile`` service writes the one its ``caddy`` service reads)."""

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from appliance.caddyfile import Site, render

CA_CHOICES = {"auto": None, "internal": True, "public": False}


class Command(BaseCommand):
    help = (
        "Print the Caddyfile for HTTPS at HEARTH_HOSTNAME in front of Hearth: automatic certificates for a public "
        "name, Caddy's internal CA for a private one (HEARTH_TLS_CA overrides), timeouts longer than "
        "HEARTH_STREAM_IDLE_TIMEOUT."
    )
    requires_system_checks = ()  # no database: compose runs it before anything is migrated

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--upstream", default=f"127.0.0.1:{settings.HEARTH_PORT}", help="Hearth's web server, host:port"
        )
        parser.add_argument("--https-port", type=int, default=443, help="where Caddy serves HTTPS (default 443)")
        parser.add_argument("--http-port", type=int, default=80, help="where Caddy redirects HTTP (default 80)")
        parser.add_argument("--health-port", type=int, default=2080, help="the health check's port on 127.0.0.1")
        parser.add_argument("--storage", default="", help="Caddy's data folder (certificates, its CA)")
        parser.add_argument("--output", default="-", help="the file to write ('-', the default: stdout)")

    def handle(self, *args: Any, **opts: Any) -> None:
        if not settings.HEARTH_HOSTNAME:
            raise CommandError("set HEARTH_HOSTNAME to the name people reach Hearth by (e.g. llm.example.com)")
        if settings.HEARTH_TLS_CA not in CA_CHOICES:
            raise CommandError(f"HEARTH_TLS_CA={settings.HEARTH_TLS_CA!r}: use auto, internal or public")
        site = Site(
            hostname=settings.HEARTH_HOSTNAME,
            upstream=opts["upstream"],
            stream_idle_timeout=settings.HEARTH_STREAM_IDLE_TIMEOUT,
            internal_ca=CA_CHOICES[settings.HEARTH_TLS_CA],
            email=settings.HEARTH_ACME_EMAIL,
            https_port=opts["https_port"],
            http_port=opts["http_port"],
            storage=opts["storage"],
            health_port=opts["health_port"],
        )
        text = render(site)
        if opts["output"] == "-":
            self.stdout.write(text, ending="")
            return
        Path(opts["output"]).write_text(text)
        ca = "Caddy's internal CA" if site.uses_internal_ca else "automatic certificates (ACME)"
        self.stderr.write(f"caddyfile: https://{site.hostname} → {site.upstream}, {ca}, to {opts['output']}")
