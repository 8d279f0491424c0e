"""The test run's settings: appliance.settings as they are, with two test-only changes.

- A fast password hasher (MD5): Django's default PBKDF2 takes ~1.5 s a hash on this kind of machine and the
  suite creates and signs in ~150 users (Django's docs, "Speeding up the tests"). Child processes (the web
  server, the Celery worker) inherit DJANGO_SETTINGS_MODULE and so verify the same hashes.
- Under pytest-xdist each worker gets its own data folder, Redis database and so its own Hearth instance
  (appliance.redis_keys, the Celery queues): set in the environment before appliance.settings reads it, so a
  worker's child processes, which inherit that environment and import this module again, agree with it.
  pytest-django gives each worker its own test database (``test_<name>_gw<N>``).
"""

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REDIS_DATABASES = 16  # a Redis server's default number of databases


def _own_worker_environment(worker: str) -> None:
    """``HEARTH_DATA_DIR`` and ``REDIS_URL`` of xdist worker ``worker`` ("gw0", "gw1", ...): the run's data
    folder's ``xdist-<worker>`` and the run's Redis database minus the worker's number (15, 14, ... for
    the default 15). Set once: a child process finds them already set and keeps them."""
    if os.environ.get("HEARTH_TEST_WORKER") == worker:
        return
    number = int(worker.removeprefix("gw"))
    root = Path(os.environ.get("HEARTH_DATA_DIR") or Path(__file__).resolve().parent.parent / "data")
    os.environ["HEARTH_DATA_DIR"] = str(root / f"xdist-{worker}")
    url = urlsplit(os.environ["REDIS_URL"])
    database = (int(url.path.strip("/") or 0) - number) % REDIS_DATABASES
    os.environ["REDIS_URL"] = urlunsplit(url._replace(path=f"/{database}"))
    os.environ["HEARTH_TEST_WORKER"] = worker


if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    _own_worker_environment(worker)

from django.conf import global_settings  # noqa: E402

from appliance.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = [  # MD5 makes new hashes; the defaults still read a database made elsewhere (tests/data)
    "django.contrib.auth.hashers.MD5PasswordHasher",
    *global_settings.PASSWORD_HASHERS,
]
