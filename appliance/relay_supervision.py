"""How uvicorn's supervisor judges the relay processes' health and lets go of their socket at a stop
(appliance.web_server).

uvicorn's supervisor pings each worker in turn every half second and kills, then replaces, one that does not
answer within ``timeout_worker_healthcheck`` seconds; its streams are cut with it. A thread of the worker
answers, so it needs only a moment of CPU and the GIL, but on a starved box (load average ~17 on 2 cores) one
went 5 s, uvicorn's default, without them. Hearth gives it HEARTH_WORKER_HEALTHCHECK_SECONDS (60 by default;
README "Relay processes" has the measurements).

uvicorn waits out the whole timeout when the worker dies after the ping went out (the pipe stays open in the
supervisor, so no end of file tells it), and the other workers wait with it: with 60 s, a relay killed at that
moment was replaced a minute later. ``HealthChecked`` looks every PING_STEP seconds whether the worker still
runs, and gives up at once when it does not; an answer later than SLOW_ANSWER seconds is logged (a starved
relay says so in the web log before it is ever killed).

At a stop, uvicorn's supervisor tells each worker to drain (HEARTH_DRAIN_SECONDS) and waits for them; each worker
closes its copy of the listening socket at once, but the supervisor kept its own open through the drain, so the
kernel went on completing connections nobody would accept: a request sent during ``make down`` hung until its
client gave up, and no gateway saw it to record it (trial). ``install`` makes the supervisor close its copy as soon as
the workers are told, so such a request is refused at once (connection refused) and its client can retry elsewhere
or later.
"""

import logging
import pickle
import time

from uvicorn.supervisors import multiprocess

log = logging.getLogger("appliance.web_server")
PING_STEP = 0.5  # seconds between looks at whether a worker that has not answered yet still runs
SLOW_ANSWER = 2.0  # seconds: a later answer is logged


class HealthChecked(multiprocess.Process):
    """uvicorn's worker process, its health check given up as soon as the worker is dead."""

    def _healthcheck(self, timeout: float) -> bool | None:
        """The worker's answer (whether its server has started), None when it gives none within ``timeout``
        seconds or dies meanwhile."""
        sent = time.monotonic()
        try:
            self.parent_conn.send(b"ping")
            while not self.parent_conn.poll(min(PING_STEP, max(sent + timeout - time.monotonic(), 0.0))):
                if time.monotonic() >= sent + timeout or not self.process.is_alive():
                    return None
            started: bool = self.parent_conn.recv()
        except (OSError, EOFError, pickle.UnpicklingError):
            return None
        if (waited := time.monotonic() - sent) > SLOW_ANSWER:
            log.warning("relay process %s answered its health check after %.1f s of %g", self.pid, waited, timeout)
        return started


_terminate_all = multiprocess.Multiprocess.terminate_all  # uvicorn's own, before ``install``


def _terminate_all_closing_sockets(self: multiprocess.Multiprocess) -> None:
    """uvicorn's ``terminate_all`` (each worker told to drain and stop), then the supervisor's listening sockets
    closed: the last copies once the workers have closed theirs, so no new connection is taken."""
    _terminate_all(self)
    for sock in self.sockets:
        sock.close()


def install() -> None:
    """Make uvicorn's supervisor start its workers as ``HealthChecked`` (it looks the class up at each start) and
    close its listening sockets once it has told them to stop."""
    multiprocess.Process = HealthChecked  # type: ignore[misc]
    multiprocess.Multiprocess.terminate_all = _terminate_all_closing_sockets  # type: ignore[method-assign]
