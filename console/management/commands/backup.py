"""``manage.py backup FILE``: this appliance's database, SECRET_KEY and sealed engine keys in one archive, mode 0600
(console.backup says what it holds and why); FILE ``-`` writes it to stdout (``docker compose exec -T web ...``)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from console.backup import backup


class Command(BaseCommand):
    help = (
        "Write the database (every table), SECRET_KEY and the sealed engine keys to one archive, mode 0600 "
        "(FILE replaced whole once written; '-' for stdout). Restore it with: manage.py restore FILE."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the archive to write, e.g. hearth-backup.tar.gz; '-': stdout")

    def handle(self, *args: Any, **opts: Any) -> None:
        manifest = backup(opts["file"])
        # on stderr: stdout may be the archive itself
        self.stderr.write(
            f"backup: {manifest.objects} rows of the {manifest.database} database, {len(manifest.migrations)} "
            f"migrations applied, to {opts['file']}"
        )
