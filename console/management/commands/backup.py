"""``manage.py backup FILE``: this appliance's database, SECRET_KEY and sealed engine keys in one archive, mode 0600
(console.backup says what it holds and why); FILE ``-`` writes it to stdout (``docker compose exec -T web ...``)."""

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from console.audit.recording import record
from console.backup import LEFT_OUT_WORDS, NotAFile, backup


class Command(BaseCommand):
    help = (
        "Write the database (every table but sessions), SECRET_KEY and the sealed engine keys to one archive, mode "
        "0600 (FILE replaced whole once written; '-' for stdout). Restore it with: manage.py restore FILE."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the archive to write, e.g. hearth-backup.tar.gz; '-': stdout")

    def handle(self, *args: Any, **opts: Any) -> None:
        folder = Path(opts["file"]).resolve().parent
        replaced = opts["file"] != "-" and Path(opts["file"]).exists()
        if opts["file"] != "-" and not folder.is_dir():
            raise CommandError(f"cannot write {opts['file']}: there is no folder {folder}; make it or name another")
        database = settings.DATABASES["default"]
        if "sqlite" in database["ENGINE"] and not Path(database["NAME"]).exists():  # connecting would make it, empty
            raise CommandError(
                f"there is no database at {database['NAME']}: give this command the HEARTH_DATA_DIR of the appliance "
                "(make up's), or its DATABASE_URL where it uses PostgreSQL"
            )
        try:
            manifest = backup(opts["file"])
        except NotAFile as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:  # a full disk, a folder it may not write to
            raise CommandError(f"cannot write {opts['file']}: {exc.strerror or exc}") from exc
        except DatabaseError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise CommandError(f"cannot read the database ({first}); has `manage.py migrate` run?") from exc
        record(None, "backup.create", opts["file"], {"rows": manifest.objects, "database": manifest.database})
        # on stderr: stdout may be the archive itself
        self.stderr.write(
            f"backup: {manifest.objects} rows of the {manifest.database} database, {len(manifest.migrations)} "
            f"migrations applied, to {opts['file']}" + (" (it replaced the archive that was there)" if replaced else "")
        )
        self.stderr.write(f"backup: not in it: {LEFT_OUT_WORDS}")
