"""Hearth's own /metrics: the gateway's series summed over every web process, and the engines' canonical
series (console.observability.export). Closed by default: it names models and counts tokens per key, so it
answers only the bearer token HEARTH_METRICS_TOKEN, or anyone when an admin sets HEARTH_METRICS_OPEN=true and
no token.

The engines' series are read from the database at each ask; ``hearth_engine_series_up`` says whether they were
(1), or left out because the database did not answer (0: the gateway's series are still served). The thread that
reads them is outside Django's request cycle, so it replaces a connection the database dropped itself: /metrics
recovers from a database outage at its next ask, without a restart."""

import functools
import hmac
import json
import logging
import os

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, close_old_connections
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from console.observability.export import engine_registry
from gateway.asgi_io import Receive, Scope, Send, send_json

log = logging.getLogger(__name__)
CLOSED = (
    "/metrics is closed: set HEARTH_METRICS_TOKEN and send it as 'Authorization: Bearer <token>' (compose's "
    "monitoring profile gives Prometheus the same one), or set HEARTH_METRICS_OPEN=true to serve it to anyone"
)
UNAUTHORIZED = "/metrics needs the bearer token HEARTH_METRICS_TOKEN: send 'Authorization: Bearer <token>'"


def refusal(authorization: bytes) -> tuple[int, str] | None:
    """(status, why) when a request with this Authorization header may not read /metrics, None when it may:
    401 without the right bearer token while HEARTH_METRICS_TOKEN is set, 403 while it is not and
    HEARTH_METRICS_OPEN is false (no token could open it)."""
    token = settings.HEARTH_METRICS_TOKEN
    if token:
        sent = authorization.decode("latin-1")
        return None if hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()) else (401, UNAUTHORIZED)
    return None if settings.HEARTH_METRICS_OPEN else (403, CLOSED)


async def metrics_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The appliance's own Prometheus metrics, for an external Prometheus or Grafana: the gateway's, and the
    engines' canonical series (console.observability.export, read from the database in a thread); a refused
    request gets ``refusal``'s status and ``{"error": why}``."""
    if refused := refusal(dict(scope["headers"]).get(b"authorization", b"")):
        status, why = refused
        headers = [(b"www-authenticate", b'Bearer realm="hearth-metrics"')] if status == 401 else []
        await send_json(send, status, json.dumps({"error": why}).encode(), headers)
        return
    engines = await sync_to_async(_engine_series)()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", CONTENT_TYPE_LATEST.encode())]}
    )
    await send({"type": "http.response.body", "body": generate_latest(_gateway_registry()) + engines})


SERIES_UP = (
    "# HELP hearth_engine_series_up Whether the engines' series were read from the database (1) or left out (0)\n"
    "# TYPE hearth_engine_series_up gauge\n"
    "hearth_engine_series_up {up}\n"
)


def _engine_series() -> bytes:
    """The engines' series in Prometheus's text format and ``hearth_engine_series_up`` 1, or that gauge alone at 0
    (logged) when the database does not answer. Connections the database dropped are closed first, as Django does
    at each request's start (this thread sees no request)."""
    close_old_connections()
    try:
        return generate_latest(_engine_registry()) + SERIES_UP.format(up=1).encode()
    except DatabaseError as exc:
        log.warning("/metrics: the engines' series left out, the database did not answer: %s", exc)
        return SERIES_UP.format(up=0).encode()


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
