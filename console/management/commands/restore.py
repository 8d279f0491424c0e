"""``manage.py restore FILE [--force]``: an archive of ``manage.py backup`` into this appliance's database (how,
and what it refuses, in console.backup); FILE ``-`` reads it from stdin."""

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.audit.recording import record
from console.restore import restore


class Command(BaseCommand):
    help = (
        "Restore an archive written by manage.py backup ('-' for stdin): refuses an archive from a newer Hearth and a "
        "database holding data (unless --force); migrates first, then loads everything in one transaction."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the archive to read; '-': stdin")
        parser.add_argument("--force", action="store_true", help="replace whatever the database holds")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["file"] != "-":
            if Path(opts["file"]).is_dir():
                raise CommandError(f"restore: {opts['file']} is a folder; name the archive in it (hearth-DATE.tar.gz)")
            if not Path(opts["file"]).is_file():
                raise CommandError(f"restore: no such file: {opts['file']}")
            self._restore(Path(opts["file"]), opts["force"], opts["file"])
            return
        with tempfile.TemporaryDirectory(prefix="hearth-restore-") as tmp:  # 0700: the archive holds secrets
            spooled = Path(tmp) / "archive"
            with spooled.open("wb") as out:
                shutil.copyfileobj(sys.stdin.buffer, out)
            if not spooled.stat().st_size:
                raise CommandError("restore: stdin was empty; give it the archive (restore - < hearth-DATE.tar.gz)")
            self._restore(spooled, opts["force"], "stdin")

    def _restore(self, archive: Path, force: bool, name: str) -> None:
        manifest = restore(archive, force=force, name=name, say=self.stdout.write)
        facts = {"rows": manifest.objects, "database": manifest.database, "made": manifest.created_at}
        record(None, "backup.restore", name, facts)
        self.stdout.write(
            f"restore: {manifest.objects} rows of a {manifest.database} backup made {manifest.created_at}; "
            "engine keys sealed under this appliance's SECRET_KEY"
        )
        self.stdout.write(
            "restore: keys, members and deployments are as they were then: a key revoked since works again "
            "(revoke it again), one made since is gone"
        )
        self.stdout.write(
            "restore: budgets keep what was spent since the backup: the spending and tokens-per-day counters in Redis "
            "are not lowered to the restored request log, whose rows end when the backup was made (the requests "
            "since are not in it, nor on the usage pages)"
        )
        self.stdout.write("restore: sessions are not in a backup: everyone signs in to the console again")
        if manifest.secret_key != settings.SECRET_KEY:
            self.stdout.write("restore: this appliance's SECRET_KEY is not the archive's: API keys work as before")
