"""``manage.py doctor``: the pre-flight checks, run in this process, one line each; exit status 1 on a failure.
A database that is not ready (not migrated yet, unreachable) is one more failed line, first.

Run it where engines are launched from (under compose: ``docker compose exec worker python manage.py doctor``).
"""

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from appliance.doctor import FAIL, run_checks
from console.preflight.database import database_check
from console.preflight.disk import disk_need


class Command(BaseCommand):
    help = (
        "Check that this box can run engines: Docker, the NVIDIA container runtime, the driver, free disk for "
        "the weights cache (the weights still to download plus a margin), GPUs free of other processes; a check "
        "that does not apply here reads NOT USED. Exit status 1 when a check fails."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json",
            action="store_true",
            help='print [{"name", "status", "ok", "detail", "fix"}, ...] instead of lines',
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        database = database_check()
        # the weights still to download are read from the database: without it, the margin alone
        checks = run_checks(disk_need()) if database is None else [database, *run_checks()]
        if opts["json"]:
            self.stdout.write(json.dumps([c.as_dict() for c in checks], indent=2))
        else:
            for check in checks:
                self.stdout.write(f"{check.status.upper()} {check.name}: {check.detail}")
                if check.status == FAIL:
                    self.stdout.write(f"     fix: {check.fix}")
        if not all(c.ok for c in checks):
            sys.exit(1)  # scripts and CI can tell a box that is not ready
