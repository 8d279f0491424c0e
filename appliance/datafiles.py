"""Hearth's data on disk is for its own user only: the data folder (the SQLite database, engine logs,
pids, the generated secret key, beat's schedule) is 0700, and every file a Hearth process creates is
0600 (a umask of 077), so password hashes, sessions and engine keys are not world-readable."""

import os
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_UMASK = 0o077  # new files 0600, new folders 0700


def keep_private(folder: Path) -> Path:
    """Set this process's umask to 077, make ``folder`` (and missing parents) 0700, tighten the files
    already in it to 0600 and its subfolders to 0700, and return it. Raises OSError when it cannot."""
    os.umask(PRIVATE_UMASK)
    folder.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    folder.chmod(PRIVATE_DIR)
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            (Path(root) / name).chmod(PRIVATE_DIR)
        for name in files:
            path = Path(root) / name
            if not path.is_symlink():
                path.chmod(path.stat().st_mode & 0o700)
    return folder
