"""``manage.py stop_engines``: end every engine of this appliance now (``make down`` runs it once the worker
is stopped), or with ``--keep`` only say which run; one line per engine either way. What is wanted of each
deployment is kept: the ones wanted serving come back when the worker starts again (console.deployments.restoring)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from console.deployments.stopping import Engine, live_engines, stop_everything


def _describe(engine: Engine) -> str:
    owner = engine.deployment or "no deployment (an orphan)"
    return f"{owner}: {engine.name} ({engine.handle or 'not started'})"


class Command(BaseCommand):
    help = (
        "Stop every engine this appliance runs and mark its deployment stopped, keeping what is wanted of it (make "
        "down does, once the worker is down; the worker launches the ones wanted serving again when it starts); "
        "--keep leaves them running and lists them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--keep", action="store_true", help="leave the engines running; only list them")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["keep"]:
            for engine in live_engines():
                self.stdout.write(f"down: kept running (KEEP_ENGINES=1) {_describe(engine)}")
            return
        for engine in stop_everything("make down"):
            self.stdout.write(f"down: stopped engine {_describe(engine)}")
