"""Celery entry points of alerts: beat evaluates the rules every HEARTH_ALERT_INTERVAL seconds; each piece of
news is sent by its own task, retried with backoff (console.alerts.delivery). While beat is stopped, the upkeep
worker sends the evaluation itself (``evaluate_while_beat_is_stopped``), so the rule that says so can fire."""

import functools
import time

import redis
from celery import Task, current_app, shared_task
from celery.signals import heartbeat_sent
from django.conf import settings
from django.db import transaction

from appliance import celery_heartbeats
from appliance.celery_queues import UPKEEP_QUEUE
from appliance.redis_keys import redis_key
from console.alerts import delivery
from console.alerts.evaluate import evaluate

EVALUATE = "console.alerts.tasks.evaluate_alerts"
DELIVER = "console.alerts.tasks.deliver"
_next_look = [0.0]  # monotonic seconds of this worker's next look at beat's heartbeat


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


@heartbeat_sent.connect
def evaluate_while_beat_is_stopped(**kwargs: object) -> None:
    """At a worker's heartbeat (its main process, every 2 s; celery_heartbeats), every HEARTH_ALERT_INTERVAL seconds in
    a worker taking the upkeep queue: while beat is taken for stopped, send the alerts' evaluation that beat would
    have sent, once per interval among the workers (a Redis key set only when absent, expiring with the interval).
    Beat sends every evaluation, so the rule saying beat is stopped could never fire: a trial's beat killed for 3
    minutes alerted no one. Never raises: a heartbeat must go on."""
    now, every = time.monotonic(), settings.HEARTH_ALERT_INTERVAL
    if now < _next_look[0] or UPKEEP_QUEUE not in (current_app.amqp.queues.consume_from or current_app.amqp.queues):
        return
    _next_look[0] = now + every
    if not celery_heartbeats.read().beat_stopped():
        return
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=celery_heartbeats.TIMEOUT)
        if client.set(redis_key("alerts-without-beat"), 1, nx=True, px=max(int(every * 1000) - 500, 1)):
            evaluate_alerts.apply_async(expires=every)
    except (redis.RedisError, OSError):  # the broker is Redis too: nothing can be sent until it answers
        return
