"""A backup names a new file or a regular one, which it replaces whole; anything else at that path (a device such as
/dev/null, a folder, a pipe, a symbolic link) is refused before anything is read or written, and it stays what it
was (console.backup.refused_destination): a trial's backup to /dev/null, run as root, made it a regular file."""

import os
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from console.audit.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("kind", ["pipe", "folder", "link"])
def test_a_destination_that_is_not_a_file_is_refused_and_left_as_it_was(tmp_path: Path, kind: str) -> None:
    target, kept = tmp_path / "hearth-backup.tar.gz", tmp_path / "kept.tar.gz"
    kept.write_bytes(b"an older archive")
    {"pipe": os.mkfifo, "folder": os.mkdir, "link": lambda p: p.symlink_to(kept)}[kind](target)
    why = {
        "pipe": "it is a device, pipe or socket, not a file; name a new file, or '-'",
        "folder": "it is a folder, not a file",
        "link": f"it is a symbolic link (to {kept}); name the file itself",
    }[kind]
    with pytest.raises(CommandError, match=re.escape(f"will not replace {target}: {why}")):
        call_command("backup", str(target))
    assert [target.is_fifo(), target.is_dir(), target.is_symlink()] == [kind == k for k in ("pipe", "folder", "link")]
    assert kept.read_bytes() == b"an older archive" and not AuditEntry.objects.filter(action="backup.create").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".hearth-backup-")] == []


@pytest.mark.django_db(transaction=True)  # the backup reads in a transaction of its own
def test_a_regular_file_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "hearth-backup.tar.gz"
    target.write_bytes(b"an older archive")
    call_command("backup", str(target))
    assert target.is_file() and target.read_bytes()[:2] == b"\x1f\x8b" and oct(target.stat().st_mode & 0o777) == "0o600"
