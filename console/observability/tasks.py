"""Celery entry points of observability (beat runs them; the worker, which holds the GPUs, executes them)."""

import os
import socket
import time

from celery import shared_task
from django.conf import settings

from console.observability import charge_check, gpu_strip, history, request_spool, scraping

SCRAPE = "console.observability.tasks.scrape_metrics"
MAINTAIN = "console.observability.tasks.maintain_history"
PUBLISH_GPUS = "console.observability.tasks.publish_gpus"
CHECK_ACCOUNTING = "console.observability.tasks.check_accounting"


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


@shared_task(name=CHECK_ACCOUNTING)
def check_accounting() -> None:
    """Write the request log rows waiting in the spool (request_spool.drain: the gateway processes write them as
    they come; this writes those of processes that are gone), then hold Redis's spending counters to the request
    log (charge_check), every HEARTH_ACCOUNTING_CHECK_INTERVAL seconds. Raises while the database or Redis does
    not answer: the rows wait, and the next run tries again."""
    request_spool.drain(f"beat/{socket.gethostname()}/{os.getpid()}")
    charge_check.check()
