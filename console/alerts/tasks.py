"""Celery entry points of alerts: beat evaluates the rules every HEARTH_ALERT_INTERVAL seconds; each piece of
news is sent by its own task, retried with backoff (console.alerts.delivery)."""

import functools

from celery import Task, shared_task
from django.db import transaction

from console.alerts import delivery
from console.alerts.evaluate import evaluate

EVALUATE = "console.alerts.tasks.evaluate_alerts"
DELIVER = "console.alerts.tasks.deliver"


@shared_task(name=EVALUATE)
def evaluate_alerts() -> None:
    """Evaluate every rule (console.alerts.evaluate) and send the news it made once it is committed."""
    with transaction.atomic():
        made = evaluate()
        for delivery_id in made:
            transaction.on_commit(functools.partial(deliver.delay, delivery_id))


@shared_task(name=DELIVER, bind=True, max_retries=delivery.MAX_ATTEMPTS)
def deliver(self: Task, delivery_id: int) -> None:
    """Send one delivery; try again after its backoff while it fails (the row counts and says the failures)."""
    wait = delivery.attempt(delivery_id)
    if wait is not None:
        raise self.retry(countdown=wait)
