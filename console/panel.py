"""The live panel's numbers, from the scrapes console.tasks.scrape_metrics keeps in Redis."""

import json
import time
from dataclasses import dataclass

import redis
from django.conf import settings

from console.models import Deployment, DeploymentState
from console.tasks import metrics_key
from engines.metrics import Scrape, tokens_per_second

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
    """Live numbers of a ready deployment's current replica; none for any other state (old numbers of
    a stopped engine would look live)."""
    replica = dep.current_replica
    return panel_data(replica.pk if replica and dep.state == DeploymentState.READY else None)


def panel_data(replica_id: int | None) -> PanelData:
    if replica_id is None:
        return PanelData({}, None, None)
    r = redis.Redis.from_url(settings.REDIS_URL)
    raw = r.lrange(metrics_key(replica_id), 0, 1)
    scrapes = [Scrape(**json.loads(item)) for item in raw]
    if not scrapes:
        return PanelData({}, None, None)
    rate = tokens_per_second(scrapes[1], scrapes[0]) if len(scrapes) == 2 else None
    return PanelData(scrapes[0].values, rate, time.time() - scrapes[0].time)
