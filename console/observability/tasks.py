"""Celery entry points of observability (beat runs them)."""

from celery import shared_task

from console.observability import scraping

SCRAPE = "console.observability.tasks.scrape_metrics"


@shared_task(name=SCRAPE)
def scrape_metrics() -> None:
    """Scrape every ready replica's /metrics (beat, every HEARTH_SCRAPE_INTERVAL seconds)."""
    scraping.scrape_all()
