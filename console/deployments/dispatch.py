"""The one seam through which deployment code enqueues work for the Celery worker.

Tasks are sent by name (``send_task``), so domain modules never import console.deployments.tasks, which
imports them: the task module is the worker's entry point, nothing else's. Each name is the task's own
(``@shared_task(name=...)`` in tasks.py); a test checks that every name here is registered.
"""

import redis
from celery import current_app
from django.conf import settings
from django.db import transaction

from console.errors import ServiceAway

LAUNCH = "console.deployments.tasks.launch_deployment"
RESUME_LAUNCH = "console.deployments.tasks.resume_launch"
WATCH_REPLICA = "console.deployments.tasks.watch_replica"
RESTART_REPLICA = "console.deployments.tasks.restart_replica"
STOP = "console.deployments.tasks.stop_deployment"
RECREATE = "console.deployments.tasks.recreate_deployment"
RECONCILE = "console.deployments.tasks.reconcile"
SLEEP = "console.deployments.tasks.sleep_deployment"  # (deployment id, reason)
WAKE = "console.deployments.tasks.wake_deployment"  # (deployment id, reason); console.deployments.wakeups sends it
STOP_IDLE = "console.deployments.tasks.stop_idle_deployment"  # (deployment id, reason)
LAUNCH_WHEN_ROOM = "console.deployments.tasks.launch_when_room"  # (deployment id, the admin's consent)
SCALE = "console.deployments.tasks.scale_deployment"
CHECK_SERVING = "console.deployments.tasks.check_serving"  # (deployment id); console.deployments.engine_checks
NAMES = (
    LAUNCH,
    RESUME_LAUNCH,
    WATCH_REPLICA,
    RESTART_REPLICA,
    STOP,
    RECREATE,
    RECONCILE,
    SLEEP,
    WAKE,
    STOP_IDLE,
    LAUNCH_WHEN_ROOM,
    SCALE,
    CHECK_SERVING,
)


QUEUE_TIMEOUT = 2.0  # seconds the broker has to answer an admin action's check


def check_queue() -> None:
    """Raises ServiceAway when the broker (Redis) does not answer a PING within QUEUE_TIMEOUT seconds
    (``send_after_commit`` asks it; an action whose work goes through Redis by another way asks it first)."""
    client = redis.Redis.from_url(
        settings.CELERY_BROKER_URL, socket_connect_timeout=QUEUE_TIMEOUT, socket_timeout=QUEUE_TIMEOUT
    )
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        raise ServiceAway(
            f"The task queue (Redis) does not answer ({type(exc).__name__}); nothing was changed. "
            "Try again once it is back."
        ) from exc
    finally:
        client.close()


def send_after_commit(name: str, object_id: int, *args: str | bool) -> None:
    """``send`` once the caller's transaction commits, the broker asked now (``check_queue``). Called inside the
    transaction that makes the change, after it: with Redis away ServiceAway is raised there and rolls the change
    back, where the send after the commit would have failed with the change kept (a 500, and the deployment left
    pending or stopping with no task to move it on)."""
    check_queue()
    transaction.on_commit(lambda: send(name, object_id, *args))


def send(name: str, object_id: int, *args: str | bool, countdown: float = 0.0) -> None:
    """Enqueue task ``name`` for a deployment or replica id (and the task's further ``args``, JSON values),
    ``countdown`` seconds from now.

    Raises kombu's OperationalError when the broker cannot be reached.
    """
    current_app.send_task(name, (object_id, *args), countdown=countdown or None)
