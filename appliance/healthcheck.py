"""compose's health checks of the Celery processes: ``python -m appliance.healthcheck worker`` (``worker-long``,
``beat``) exits 0 while that process gives signs of life (appliance.celery_heartbeats: a worker's heartbeat every 2
s, beat's at each task it sends), and 1 once it has been silent longer than ``celery_heartbeats.limit_for`` its
period, said it stopped, never ran, or Redis does not answer. One line says which (Docker keeps it in ``docker
inspect``'s health log). Run in the process's own container, with its environment: the same HEARTH_INSTANCE, so the
same Redis keys; a worker answers for its own host name, the container's.

The web service's check is HTTP (``GET /ready``, gateway.probes): the Dockerfile's HEALTHCHECK and compose.yaml's.
"""

import os
import sys

from appliance import celery_heartbeats

EXIT_HEALTHY, EXIT_UNHEALTHY = 0, 1  # Docker reads 0 and 1 only (2 is reserved)


def main(argv: list[str]) -> int:
    """Check ``argv`` ``["worker"]``, ``["worker-long"]`` or ``["beat"]``; returns the exit status, having printed
    why."""
    if len(argv) != 1 or argv[0] not in celery_heartbeats.PROCESSES:
        print(f"usage: python -m appliance.healthcheck {'|'.join(celery_heartbeats.PROCESSES)}", file=sys.stderr)
        return EXIT_UNHEALTHY
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")  # read lazily, at the first setting
    reason = celery_heartbeats.stopped_here(argv[0])
    print(reason or f"{argv[0]}: running")
    return EXIT_UNHEALTHY if reason else EXIT_HEALTHY


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
