"""Free TCP ports for the servers a test starts, picked where nothing else takes them in the seconds before they bind.

A port the kernel picks (a bind to port 0) lies in its ephemeral range, which outgoing connections draw from too,
and which another test worker's pick may return again once the first socket is closed. A server told such a port
can find it taken by the time it binds: a full run's `make up` test met "address already in use" so. Here each
xdist worker counts through its own slice of the ports below the ephemeral range (the engines Hearth starts take
theirs above it: appliance.runtimes.process.engine_port), skipping any port found bound.
"""

import itertools
import os
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 20_000  # below are well-known services' ports (PostgreSQL's 5432, Redis's 6379, …)


def _slice() -> range:
    """This worker's ports: its share of LOWEST up to the ephemeral range's start, by PYTEST_XDIST_WORKER ("gw3")
    and PYTEST_XDIST_WORKER_COUNT; all of them outside xdist. Empty where the range cannot be read."""
    try:
        ephemeral = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return range(0)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    size = max(ephemeral - LOWEST, 0) // max(workers, 1)
    return range(LOWEST + worker * size, LOWEST + (worker + 1) * size)


_PORTS = _slice()
_NEXT = itertools.cycle(_PORTS)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that no socket holds now, and that this process hands out again only once it has
    counted through the rest of its slice. A port the kernel picks where this worker has no slice."""
    for _ in range(len(_PORTS)):
        port = next(_NEXT)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
