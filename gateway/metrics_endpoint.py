"""Hearth's own /metrics: the gateway's series summed over every web process, and the engines' canonical
series (console.observability.export), behind HEARTH_METRICS_TOKEN when it is set."""

import functools
import hmac
import os

from asgiref.sync import sync_to_async
from django.conf import settings
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from console.observability.export import engine_registry
from gateway.asgi_io import Receive, Scope, Send, send_json


async def metrics_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The appliance's own Prometheus metrics, for an external Prometheus or Grafana: the gateway's, and the
    engines' canonical series (console.observability.export, read from the database in a thread). When
    HEARTH_METRICS_TOKEN is set, a request without ``Authorization: Bearer <token>`` gets 401."""
    token = settings.HEARTH_METRICS_TOKEN
    if token:
        sent = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            headers = [(b"www-authenticate", b'Bearer realm="hearth-metrics"')]
            await send_json(send, 401, b'{"error": "/metrics needs the bearer token HEARTH_METRICS_TOKEN"}', headers)
            return
    engines = await sync_to_async(generate_latest)(_engine_registry())
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", CONTENT_TYPE_LATEST.encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": generate_latest(_gateway_registry()) + engines})


@functools.cache
def _engine_registry() -> CollectorRegistry:
    return engine_registry()


@functools.cache
def _gateway_registry() -> CollectorRegistry:
    """The gateway's metrics summed over every web process (prometheus-client's multiprocess mode, whose
    folder appliance.web_server sets), or this process's alone when it runs outside it."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return registry


