"""The relay processes' ASGI entry point: ``/v1/*`` goes to the gateway's lean async path (however spelled:
``//v1/x``, ``/V1/x``, ``/v1.json`` answer the gateway's JSON 404, never the console's page), so do the open
probes ``/health`` and ``/ready`` (gateway.probes), ``/metrics``, and the gateway's endpoints asked without
their ``/v1`` (a client's base URL set without it: gateway.wrong_urls answers with the fix); the rest is the
console's.

The console is Django: forwarded to the console process when the environment's HEARTH_CONSOLE_SOCKET
names its socket (appliance.web_server sets it after loading the settings, so it is read here, not there;
appliance.console_proxy says why), else served here in this process (plain uvicorn on this module, as the
tests and benches run it).
"""

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
django_application = get_asgi_application()

from appliance.console_proxy import ConsoleProxy  # noqa: E402
from appliance.orphan_watch import end_with_the_web_server  # noqa: E402
from gateway.app import PROBE_PATHS, Gateway, misdirected  # noqa: E402 - needs Django set up first
from gateway.asgi_io import Receive, Scope, Send  # noqa: E402
from gateway.metrics_endpoint import metrics_app  # noqa: E402

gateway = Gateway()
console_socket = os.environ.get("HEARTH_CONSOLE_SOCKET", "")
console_proxy = ConsoleProxy(console_socket) if console_socket else None
console = console_proxy or django_application


async def lifespan(scope: Scope, receive: Receive, send: Send) -> None:
    """The gateway's lifespan, with this process ending with its web server (appliance.orphan_watch) and
    the console proxy's connections closed before shutdown completes."""
    watch: list[asyncio.Task[None]] = []

    async def sending(message: Mapping[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            watch.append(asyncio.ensure_future(end_with_the_web_server()))
        if message["type"] == "lifespan.shutdown.complete":
            for task in watch:
                task.cancel()
            if console_proxy is not None:
                await console_proxy.close()
        await send(message)

    await gateway.lifespan(scope, receive, sending)


def _under_v1(path: str) -> bool:
    """``/v1``, or a path that starts with it however its slashes and case go and whatever follows that is not
    a letter or digit (``//v1/models``, ``/V1/models``, ``/v1.json``, ``/v1;x``); not ``/v10`` or ``/v1beta``."""
    rest = path.lstrip("/")
    return rest[:2].lower() == "v1" and not rest[2:3].isalnum()


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
    elif scope["type"] == "http" and (scope["path"].startswith("/v1/") or _under_v1(scope["path"])):
        await gateway(scope, receive, send)
    elif scope["type"] == "http" and scope["path"] in PROBE_PATHS:
        await gateway.probe(scope, receive, send)
    elif scope["type"] == "http" and scope["path"] == "/metrics":
        await metrics_app(scope, receive, send)
    elif scope["type"] == "http" and misdirected(scope):
        await gateway(scope, receive, send)
    else:
        await console(scope, receive, send)
