"""Celery entry points of observability (beat runs them; the worker, which holds the GPUs, executes them)."""

import time

from celery import shared_task
from django.conf import settings

from console.observability import gpu_strip, history, scraping

SCRAPE = "console.observability.tasks.scrape_metrics"
MAINTAIN = "console.observability.tasks.maintain_history"
PUBLISH_GPUS = "console.observability.tasks.publish_gpus"


@shared_task(name=SCRAPE)
def scrape_metrics() -> None:
    """Scrape every ready replica's /metrics (every HEARTH_SCRAPE_INTERVAL seconds)."""
    scraping.scrape_all()


@shared_task(name=MAINTAIN)
def maintain_history() -> None:
    """Roll the history up into 5-minute periods and prune what is past retention (every 5 minutes)."""
    now = time.time()
    history.roll_up(now, settings.HEARTH_SCRAPE_INTERVAL)
    history.prune(now)


@shared_task(name=PUBLISH_GPUS)
def publish_gpus() -> None:
    """Publish this worker's GPU inventory and telemetry for the web process (every HEARTH_SCRAPE_INTERVAL)."""
    gpu_strip.publish()
