"""Hearth's data on disk is for its own user only: the data folder (the SQLite database, engine logs,
pids, the generated secret key, beat's schedule) is 0700, and every file a Hearth process creates is
0600 (a umask of 077), so password hashes, sessions and engine keys are not world-readable."""

import os
import stat
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

PRIVATE_DIR = 0o700
PRIVATE_UMASK = 0o077  # new files 0600, new folders 0700


def keep_private(folder: Path) -> Path:
    """Set this process's umask to 077, make ``folder`` (and missing parents) 0700, tighten what this
    user owns in it (files to at most 0600, e.g. an older install's 0644 database; folders to 0700), and
    return it. What another user owns is left to them. Raises OSError when ``folder`` cannot be made."""
    os.umask(PRIVATE_UMASK)
    folder.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    mine = os.getuid()
    for root, _dirs, files in os.walk(folder):
        for path in [Path(root), *(Path(root) / name for name in files)]:
            info = path.lstat()
            if info.st_uid == mine and not path.is_symlink():
                path.chmod(PRIVATE_DIR if path.is_dir() else stat.S_IMODE(info.st_mode) & 0o700)
    return folder


def keep_data_dir_private() -> None:
    """keep_private(settings.DATA_DIR): what Hearth's commands (manage.py, the web server, the Celery worker
    and beat) do first, so importing the settings changes nothing on disk. Settings that do not load are
    left for the command to report as it does."""
    try:
        folder = settings.DATA_DIR
    except ImproperlyConfigured:
        return
    keep_private(folder)
