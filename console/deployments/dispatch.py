"""The one seam through which deployment code enqueues work for the Celery worker.

Tasks are sent by name (``send_task``), so domain modules never import console.deployments.tasks, which
imports them: the task module is the worker's entry point, nothing else's. Each name is the task's own
(``@shared_task(name=...)`` in tasks.py); a test checks that every name here is registered.
"""

from celery import current_app

LAUNCH = "console.deployments.tasks.launch_deployment"
RESUME_LAUNCH = "console.deployments.tasks.resume_launch"
WATCH_REPLICA = "console.deployments.tasks.watch_replica"
RESTART_REPLICA = "console.deployments.tasks.restart_replica"
STOP = "console.deployments.tasks.stop_deployment"
RECREATE = "console.deployments.tasks.recreate_deployment"
RECONCILE = "console.deployments.tasks.reconcile"
NAMES = (LAUNCH, RESUME_LAUNCH, WATCH_REPLICA, RESTART_REPLICA, STOP, RECREATE, RECONCILE)


def send(name: str, object_id: int, countdown: float = 0.0) -> None:
    """Enqueue task ``name`` for a deployment or replica id, ``countdown`` seconds from now.

    Raises kombu's OperationalError when the broker cannot be reached.
    """
    current_app.send_task(name, (object_id,), countdown=countdown or None)
