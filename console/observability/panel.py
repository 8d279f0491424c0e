"""The live panel's numbers, from the scrapes console.observability.scraping keeps in Redis."""

import json
import time
from dataclasses import dataclass

import redis
from django.conf import settings

from console.deployments.models import Deployment, DeploymentState
from console.observability.scraping import metrics_key
from engines.metrics import RATIO_METRICS, Scrape, tokens_per_second

STALE_AFTER_SCRAPES = 3  # a scrape older than this many intervals is shown as stale


@dataclass(frozen=True)
class PanelData:
    """Latest canonical values (absent = no data), generation tokens/s, and the scrape's age in seconds."""

    values: dict[str, float]
    generation_tokens_per_second: float | None
    age_seconds: float | None

    @property
    def stale(self) -> bool:
        return self.age_seconds is not None and (
            self.age_seconds > STALE_AFTER_SCRAPES * settings.HEARTH_SCRAPE_INTERVAL
        )


def live_panel(dep: Deployment) -> PanelData:
    """Live numbers of a ready deployment, summed over its serving replicas (KV-cache use averaged);
    none for any other state (old numbers of a stopped engine would look live)."""
    if dep.state != DeploymentState.READY:
        return PanelData({}, None, None)
    ids = list(dep.replicas.filter(running=True).values_list("pk", flat=True))
    return combine([panel_data(pk) for pk in ids])


def combine(parts: list[PanelData]) -> PanelData:
    """Several replicas' panels as one: counts and rates add up, ratios average, the oldest scrape's age
    counts (a replica without data makes the whole panel no fresher than "no data")."""
    present = [p for p in parts if p.age_seconds is not None]
    if not present:
        return PanelData({}, None, None)
    values: dict[str, float] = {}
    for name in {n for p in present for n in p.values}:
        found = [p.values[name] for p in present if name in p.values]
        values[name] = sum(found) / len(found) if name in RATIO_METRICS else sum(found)
    rates = [p.generation_tokens_per_second for p in present]
    rate = None if any(r is None for r in rates) else sum(r for r in rates if r is not None)
    ages = [p.age_seconds for p in present if p.age_seconds is not None]
    return PanelData(values, rate, max(ages))


def panel_data(replica_id: int) -> PanelData:
    """One replica's latest scrape and its generation tokens/s against the scrape before."""
    r = redis.Redis.from_url(settings.REDIS_URL)
    raw = r.lrange(metrics_key(replica_id), 0, 1)
    scrapes = [Scrape(**json.loads(item)) for item in raw]
    if not scrapes:
        return PanelData({}, None, None)
    rate = tokens_per_second(scrapes[1], scrapes[0]) if len(scrapes) == 2 else None
    return PanelData(scrapes[0].values, rate, time.time() - scrapes[0].time)
