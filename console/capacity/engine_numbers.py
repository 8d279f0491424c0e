"""The engine's own numbers over a stretch of a check, from the scrapes console.observability keeps in its
history (raw samples, one per scrape): KV-cache peak, preemptions, requests running and waiting
(engines.capacity.results.engine_window), combined over the deployment's serving replicas."""

import time
from datetime import UTC, datetime

from django.conf import settings

from console.deployments.models import Deployment
from console.observability.models import MetricSample, Resolution
from engines.capacity.results import engine_window
from engines.metrics import Scrape

SETTLE_SCRAPES = 1.5  # wait at most this many scrape intervals for a scrape after the stretch ends


def replica_scrapes(replica_id: int, since: float) -> list[Scrape]:
    """A replica's scrapes from ``since`` (Unix seconds; the one just before it too, as a counter's baseline),
    newest first, with their canonical values."""
    rows = MetricSample.objects.filter(replica_id=replica_id, resolution=Resolution.SCRAPE)
    before = rows.filter(at__lt=datetime.fromtimestamp(since, UTC)).order_by("-at")[:1]
    inside = rows.filter(at__gte=datetime.fromtimestamp(since, UTC)).order_by("-at")
    return [Scrape(r.at.timestamp(), dict(r.values.get("v", {}))) for r in [*inside, *before]]


def over(dep: Deployment, start: float, end: float) -> dict[str, float | None]:
    """The engine's numbers between ``start`` and ``end`` (Unix seconds), after waiting (briefly) for a
    scrape taken after ``end`` so the counters include the stretch's last moments. KV-cache peak is the
    highest replica's, counts add up over replicas; a number no replica's engine gives stays None."""
    replicas = list(dep.replicas.filter(running=True).values_list("pk", flat=True))
    give_up = time.time() + SETTLE_SCRAPES * settings.HEARTH_SCRAPE_INTERVAL
    scrapes = {pk: replica_scrapes(pk, start) for pk in replicas}
    while time.time() < give_up and any(s and s[0].time < end for s in scrapes.values()):
        time.sleep(0.2)
        scrapes = {pk: replica_scrapes(pk, start) for pk in replicas}
    windows = [engine_window(s, start, end) for s in scrapes.values()]
    combined: dict[str, float | None] = {}
    names = ("kv_cache_peak", "preemptions", "running_peak", "waiting_peak", "waiting_mean", "running_while_waiting")
    for name in (*names, "scrapes"):
        found = [w[name] for w in windows if w.get(name) is not None]
        pick = max if name == "kv_cache_peak" else sum
        combined[name] = float(pick(v for v in found if v is not None)) if found else None
    return combined
