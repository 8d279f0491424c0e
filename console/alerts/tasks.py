"""Celery entry points of alerts: beat evaluates the rules every HEARTH_ALERT_INTERVAL seconds; each piece of
news is sent by its own task, retried with backoff (console.alerts.delivery). While beat is stopped, the upkeep
worker sends the evaluation itself, and while the upkeep worker is stopped, the long-task worker evaluates in its
own queue and sends the news from there (``evaluate_while_stopped``), so the rule that says so can fire."""

import functools
import time

import redis
from celery import Task, current_app, shared_task
from celery.signals import heartbeat_sent, worker_ready
from django.conf import settings
from django.db import transaction

from appliance import celery_heartbeats
from appliance.celery_queues import LONG_QUEUE, UPKEEP_QUEUE
from appliance.redis_keys import redis_key
from console.alerts import delivery
from console.alerts.evaluate import evaluate

EVALUATE = "console.alerts.tasks.evaluate_alerts"
DELIVER = "console.alerts.tasks.deliver"
_next_look = [0.0]  # monotonic seconds of this worker's next look at beat's heartbeat
_ready_at: list[float] = []  # monotonic seconds this worker said it was ready (worker_ready)
UPKEEP_GRACE = 30.0  # seconds a long-task worker runs before it takes a stopped upkeep worker for one to tell of


@shared_task(name=EVALUATE, bind=True)
def evaluate_alerts(self: Task) -> None:
    """Evaluate every rule (console.alerts.evaluate) and send the news it made once it is committed, in the queue
    this evaluation came in (the long one's while the upkeep worker is stopped; Celery's retries keep it)."""
    queue = (self.request.delivery_info or {}).get("routing_key") or None
    with transaction.atomic():
        made = evaluate()
        for delivery_id in made:
            transaction.on_commit(functools.partial(deliver.apply_async, (delivery_id,), queue=queue))


@shared_task(name=DELIVER, bind=True, max_retries=delivery.MAX_ATTEMPTS)
def deliver(self: Task, delivery_id: int) -> None:
    """Send one delivery; try again after its backoff while it fails (the row counts and says the failures)."""
    wait = delivery.attempt(delivery_id)
    if wait is not None:
        raise self.retry(countdown=wait)


@heartbeat_sent.connect
def evaluate_while_stopped(**kwargs: object) -> None:
    """At a worker's heartbeat (its main process, every 2 s; celery_heartbeats), every HEARTH_ALERT_INTERVAL seconds:
    in a worker taking the upkeep queue while beat is taken for stopped, and in one taking only the long queue while
    no upkeep worker is taken for running, send the alerts' evaluation that beat and the upkeep worker would have
    made (to the long queue in the second case), once per interval among the workers (a Redis key set only when
    absent, expiring with the interval). Beat sends every evaluation and the upkeep worker runs it, so the rule
    saying either is stopped could never fire: trials killed each for minutes and no one was told. A long-task
    worker waits UPKEEP_GRACE after its own start: `make up` and compose start both workers together, and a
    restart's upkeep worker, not ready yet, is not one to tell of. Never raises: a heartbeat must go on."""
    now, every = time.monotonic(), settings.HEARTH_ALERT_INTERVAL
    if now < _next_look[0]:
        return
    _next_look[0] = now + every
    queues = current_app.amqp.queues.consume_from or current_app.amqp.queues
    liveness = celery_heartbeats.read()
    if UPKEEP_QUEUE in queues and liveness.beat_stopped():
        why, queue = "alerts-without-beat", None
    elif (
        UPKEEP_QUEUE not in queues
        and LONG_QUEUE in queues
        and _up_for(now) >= UPKEEP_GRACE
        and liveness.worker_stopped()
    ):
        why, queue = "alerts-without-upkeep", LONG_QUEUE
    else:
        return
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=celery_heartbeats.TIMEOUT)
        if client.set(redis_key(why), 1, nx=True, px=max(int(every * 1000) - 500, 1)):
            evaluate_alerts.apply_async(expires=every, queue=queue)
    except (redis.RedisError, OSError):  # the broker is Redis too: nothing can be sent until it answers
        return


@worker_ready.connect
def note_ready(**kwargs: object) -> None:
    """``worker_ready`` receiver: when this worker started taking tasks (UPKEEP_GRACE counts from it)."""
    _ready_at[:] = [time.monotonic()]


def _up_for(now: float) -> float:
    """Seconds this worker has taken tasks (0 before it said it was ready)."""
    return now - _ready_at[0] if _ready_at else 0.0
