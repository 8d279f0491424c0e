"""The one ASGI entry point: ``/v1/*`` goes to the gateway's lean async path, so do the open probes
``/health`` and ``/ready`` (gateway.probes) and ``/metrics``; the rest goes to Django."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
django_application = get_asgi_application()

from gateway.app import PROBE_PATHS, Gateway  # noqa: E402 - needs Django set up first
from gateway.asgi_io import Receive, Scope, Send  # noqa: E402
from gateway.metrics_endpoint import metrics_app  # noqa: E402

gateway = Gateway()


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await gateway.lifespan(scope, receive, send)
    elif scope["type"] == "http" and (scope["path"] == "/v1" or scope["path"].startswith("/v1/")):
        await gateway(scope, receive, send)
    elif scope["type"] == "http" and scope["path"] in PROBE_PATHS:
        await gateway.probe(scope, receive, send)
    elif scope["type"] == "http" and scope["path"] == "/metrics":
        await metrics_app(scope, receive, send)
    else:
        await django_application(scope, receive, send)
