"""Template context for every console page."""

import time

from django.conf import settings
from django.http import HttpRequest

from appliance import celery_heartbeats
from appliance.hardware import PUBLISHED_FRESH_SCRAPES, InventoryError, current_inventory


def inventory(request: HttpRequest) -> dict[str, object]:
    """The GPU inventory in force, in words, where it was read and how long ago, for the header (so a simulated
    box is never mistaken for a real one, nor an old reading for a live one)."""
    if not request.user.is_authenticated:
        return {}
    try:
        found = current_inventory()
    except InventoryError as exc:
        return {"inventory": f"GPU inventory unreadable: {exc}", "inventory_stale": True}
    now = time.time()
    limit = PUBLISHED_FRESH_SCRAPES * settings.HEARTH_SCRAPE_INTERVAL + 1
    old = found.read_at is not None and now - found.read_at > limit
    return {"inventory": found.describe(), "inventory_origin": found.provenance(now), "inventory_stale": old}


def celery_processes(request: HttpRequest) -> dict[str, object]:
    """For the header: why Celery beat, the upkeep worker or the long tasks' worker is taken for stopped ("" while
    it runs), or why that cannot be told (appliance.celery_heartbeats, appliance.celery_queues)."""
    if not request.user.is_authenticated:
        return {}
    found = celery_heartbeats.read()
    return {
        "beat_stopped": found.beat_stopped(),
        "worker_stopped": found.worker_stopped(),
        "long_worker_stopped": found.long_worker_stopped(),
        "liveness_unreadable": found.unreadable,
    }
