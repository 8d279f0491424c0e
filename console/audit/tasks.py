"""Audit's Celery entry points: the retention prune, run by beat every hour."""

import logging

from celery import shared_task
from django.conf import settings

from console.audit.queries import prune

log = logging.getLogger(__name__)
PRUNE = "console.audit.tasks.prune_audit_log"  # the name beat sends (appliance.celery)


@shared_task(name=PRUNE, ignore_result=True)
def prune_audit_log() -> int:
    """Delete entries older than HEARTH_AUDIT_RETENTION_DAYS; returns how many."""
    gone = prune(settings.HEARTH_AUDIT_RETENTION_DAYS)
    if gone:
        log.info("audit log: pruned %d entries older than %d days", gone, settings.HEARTH_AUDIT_RETENTION_DAYS)
    return gone
