"""The Celery app: Redis broker, JSON payloads, and the beat schedule (metrics scrape, reconcile)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")

app = Celery("appliance")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def schedule_periodic_tasks(sender: Celery, **kwargs: object) -> None:
    """Scrape every HEARTH_SCRAPE_INTERVAL and reconcile every HEARTH_RECONCILE_INTERVAL seconds.

    Each run expires just under its period, so a backlog never piles up behind a stalled worker.
    """
    from django.conf import settings

    scrape = settings.HEARTH_SCRAPE_INTERVAL
    reconcile = settings.HEARTH_RECONCILE_INTERVAL
    sender.add_periodic_task(scrape, sender.signature("console.tasks.scrape_metrics", expires=scrape * 0.9))
    sender.add_periodic_task(reconcile, sender.signature("console.tasks.reconcile", expires=reconcile * 0.9))
