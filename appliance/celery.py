"""The Celery app: Redis broker, JSON payloads, the beat schedule (metrics scrape, reconcile), the routes to the
upkeep queue and the long one (appliance.celery_queues), and beat's and the workers' heartbeats
(appliance.celery_heartbeats)."""

import os

from celery import Celery
from celery.signals import beat_init, heartbeat_sent, worker_init, worker_ready, worker_shutdown

from appliance import celery_heartbeats
from appliance.celery_queues import LONG_QUEUE, LONG_TASKS, UPKEEP_QUEUE
from appliance.datafiles import keep_data_dir_private

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
HARD_AFTER_SOFT = 10.0  # seconds a periodic run has, after its soft time limit, to end before its process is killed

app = Celery("appliance")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_default_queue = UPKEEP_QUEUE
app.conf.task_routes = {name: {"queue": LONG_QUEUE} for name in LONG_TASKS}
app.autodiscover_tasks()


@worker_init.connect
@beat_init.connect
def keep_the_data_folder_private(**kwargs: object) -> None:
    """The worker and beat write in the data folder (beat's schedule, engine logs, SQLite): made private first."""
    keep_data_dir_private()


# Celery's worker heartbeat (every 2 s) and shutdown note that a worker runs; the receivers are connected before any
# worker starts, since its heartbeat looks for receivers once, when it is made.
heartbeat_sent.connect(celery_heartbeats.note_worker)
worker_shutdown.connect(celery_heartbeats.note_worker_stopped)
worker_ready.connect(celery_heartbeats.forget_old_workers)


@beat_init.connect
def note_that_beat_runs(**kwargs: object) -> None:
    """Beat (its own process, or a worker's -B) notes each task it sends (appliance.celery_heartbeats)."""
    celery_heartbeats.start_beat_heartbeat(min(periodic_tasks().values()))


@app.on_after_finalize.connect
def schedule_periodic_tasks(sender: Celery, **kwargs: object) -> None:
    """Send each of ``periodic_tasks`` at its period; each run expires just under its period, so a backlog never
    piles up behind a stalled worker, and is stopped once it runs too long (``time_limits``)."""
    for name, every in periodic_tasks().items():
        soft, hard = time_limits(every)
        sender.add_periodic_task(
            every, sender.signature(name, expires=every * 0.9, soft_time_limit=soft, time_limit=hard)
        )


def time_limits(every: float) -> tuple[float, float]:
    """(soft, hard) seconds a run of a periodic task sent every ``every`` seconds may take: at least
    HEARTH_PERIODIC_TIME_LIMIT and twice its period, then HARD_AFTER_SOFT more. A run that hangs (a lock a stuck
    transaction holds, a call that never answers) would hold a worker process for ever, and beat sends the next
    runs to the others until none is left for the scrapes, reconcile or alerts. At the soft limit Celery raises
    SoftTimeLimitExceeded in the task, which ends it unless the task is blocked in C; at the hard limit the pool
    kills its process and starts another. The next run does the work: each periodic task takes up where the
    database says it is."""
    from django.conf import settings

    soft = max(settings.HEARTH_PERIODIC_TIME_LIMIT, 2 * every)
    return soft, soft + HARD_AFTER_SOFT


def periodic_tasks() -> dict[str, float]:
    """Beat's schedule, task name → seconds: scrape and publish the GPUs every HEARTH_SCRAPE_INTERVAL, reconcile
    every HEARTH_RECONCILE_INTERVAL seconds, check the request accounting every HEARTH_ACCOUNTING_CHECK_INTERVAL
    seconds, evaluate the alert rules every HEARTH_ALERT_INTERVAL seconds, roll the metric history up every 5
    minutes, prune the audit log hourly."""
    from django.conf import settings

    return {  # task names, not imports: the Celery app imports nothing of the console
        "console.observability.tasks.scrape_metrics": settings.HEARTH_SCRAPE_INTERVAL,
        "console.deployments.tasks.reconcile": settings.HEARTH_RECONCILE_INTERVAL,
        "console.audit.tasks.prune_audit_log": 3600.0,  # the audit log's retention, HEARTH_AUDIT_RETENTION_DAYS
        "console.observability.tasks.publish_gpus": settings.HEARTH_SCRAPE_INTERVAL,  # the worker's GPUs, for web
        "console.observability.tasks.maintain_history": 300.0,  # 5-minute rollups and retention
        # the request log's spool written, spending counters held to the request log
        "console.observability.tasks.check_accounting": settings.HEARTH_ACCOUNTING_CHECK_INTERVAL,
        "console.alerts.tasks.evaluate_alerts": settings.HEARTH_ALERT_INTERVAL,  # alert rules (console.alerts)
        "console.batches.tasks.sweep_batches": 10.0,  # a runner for each running batch without one
    }
