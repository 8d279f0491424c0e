"""The Celery app: Redis broker, JSON payloads, and the beat schedule (metrics scrape, reconcile)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")

app = Celery("appliance")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def schedule_periodic_tasks(sender: Celery, **kwargs: object) -> None:
    """Scrape every HEARTH_SCRAPE_INTERVAL and reconcile every HEARTH_RECONCILE_INTERVAL seconds; prune the
    audit log hourly.

    Each run expires just under its period, so a backlog never piles up behind a stalled worker.
    """
    from django.conf import settings

    periodic = {  # task names, not imports: the Celery app imports nothing of the console
        "console.observability.tasks.scrape_metrics": settings.HEARTH_SCRAPE_INTERVAL,
        "console.deployments.tasks.reconcile": settings.HEARTH_RECONCILE_INTERVAL,
        "console.audit.tasks.prune_audit_log": 3600.0,  # the audit log's retention, HEARTH_AUDIT_RETENTION_DAYS
    }
    for name, every in periodic.items():
        sender.add_periodic_task(every, sender.signature(name, expires=every * 0.9))
