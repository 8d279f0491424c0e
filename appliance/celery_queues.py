"""The Celery queues and which tasks go where. Two queues, each taken by a worker of its own (scripts/up.sh;
compose.yaml's ``worker`` and ``worker-long``), so that work holding a worker process for minutes or hours never
starves the upkeep that must run every few seconds:

- ``celery`` (Celery's default, UPKEEP_QUEUE): beat's periodic tasks (scrape, reconcile, accounting, alert rules,
  history, audit pruning, the batch sweep), alert deliveries, the health polls of loading replicas, pre-flight, and
  the engine actions bounded by an engine's own timeouts (stop, restart, sleep, wake, scale, and the recreate of a
  settings change: a tuning, in the long queue, waits for it, and would wait for ever were every long process
  held by tunings).
- ``long`` (LONG_QUEUE): LONG_TASKS, whose length has no bound of ours: a launch (an image pull and a weights
  download come first), a launch made room for, a batch's runner, a capacity check and a tuning.

Tasks are named, not imported: the Celery app imports nothing of the console (tests/test_celery_queues.py checks
that each name is a registered task).
"""

UPKEEP_QUEUE, LONG_QUEUE = "celery", "long"
LONG_TASKS = frozenset(
    {
        "console.deployments.tasks.launch_deployment",
        "console.deployments.tasks.resume_launch",
        "console.deployments.tasks.launch_when_room",
        "console.batches.tasks.run_batch",
        "console.capacity.tasks.run_check",
        "console.capacity.tasks.run_tuning",
    }
)
