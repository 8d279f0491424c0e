"""The runtime interface both the process and the Docker runtime implement."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from engines.launch import LaunchSpec


class RuntimeError_(Exception):
    """The runtime could not start or reach an engine; the message is shown to the admin."""


@dataclass(frozen=True)
class RuntimeStatus:
    """Whether a replica's engine runs; after it ended, its exit code (None when unknown)."""

    running: bool
    exit_code: int | None = None
    oom_killed: bool = False


@dataclass(frozen=True)
class Started:
    """A started engine: its handle (pid or container id) and where the gateway reaches it."""

    handle: str
    host: str
    port: int


class Runtime(Protocol):
    """Starts, inspects and stops engines by a name Hearth chooses (e.g. ``hearth-replica-12``)."""

    name: str

    def prepare(self, spec: LaunchSpec, progress: Callable[[str], None]) -> str:
        """Make the engine's image present (a pull, reporting progress in words) and return the image
        pinned by digest, for this launch and every restart of it ("" where there is no image).
        Raises RuntimeError_."""
        ...

    def start(self, name: str, spec: LaunchSpec) -> Started:
        """Start the engine. Raises RuntimeError_; a name that already runs is adopted, not started twice."""
        ...

    def status(self, name: str) -> RuntimeStatus:
        """Whether ``name`` runs now; a name never started reads as not running."""
        ...

    def stop(self, name: str, grace_seconds: float = 10.0) -> RuntimeStatus:
        """Stop it (SIGTERM, then SIGKILL after ``grace_seconds``) and remove what is left."""
        ...

    def logs(self, name: str, lines: int = 50) -> str:
        """The last ``lines`` lines the engine printed (stdout and stderr together)."""
        ...

    def names(self) -> set[str]:
        """The names of every engine this runtime holds now, running or exited (reconcile's view)."""
        ...
