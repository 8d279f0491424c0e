"""The web server's processes end with it: a relay worker or the console process whose web server
(appliance.web_server) was killed outright (SIGKILL, the OOM killer) stops itself rather than serve on
unsupervised, holding the port against the next start.

appliance.web_server puts its pid in HEARTH_WEB_SUPERVISOR; each process under it runs
``end_with_the_web_server()`` from its ASGI lifespan. The sign is the kernel's: a process whose parent
dies is given another parent. Watched is the web server's direct child on this process's line: this process,
or its parent when that is a uvicorn supervisor of the console's several workers (which runs no lifespan of
its own). When that child's parent is no longer the web server, it gets SIGTERM, and uvicorn drains and
exits as on any stop.

Imports nothing of Hearth's.
"""

import asyncio
import logging
import os
import signal
from pathlib import Path

log = logging.getLogger(__name__)
SUPERVISOR_ENV = "HEARTH_WEB_SUPERVISOR"
INTERVAL = 1.0  # seconds between looks


def parent_of(pid: int) -> int | None:
    """``pid``'s parent from /proc/<pid>/stat (field 4), None once ``pid`` is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


async def end_with_the_web_server() -> None:
    """Return at once outside a web server (no HEARTH_WEB_SUPERVISOR, or this process is it); else SIGTERM
    the watched process (the module docstring) once the web server is gone."""
    supervisor = int(os.environ.get(SUPERVISOR_ENV) or 0)
    if supervisor in (0, os.getpid()):
        return
    watched = os.getpid() if os.getppid() == supervisor else os.getppid()
    while parent_of(watched) == supervisor:
        await asyncio.sleep(INTERVAL)
    log.warning("the web server (pid %s) is gone; stopping pid %s", supervisor, watched)
    os.kill(watched if parent_of(watched) is not None else os.getpid(), signal.SIGTERM)
