"""Runtimes turn a LaunchSpec into a running engine: ``process`` (local subprocess) or ``docker``."""

import functools

from django.conf import settings

from appliance.runtimes.base import Runtime, RuntimeError_, RuntimeStatus, Started

__all__ = ["Runtime", "RuntimeError_", "RuntimeStatus", "Started", "get_runtime"]


def engine_name_prefix() -> str:
    """How this appliance's engines' runtime names begin (``hearth-<instance>-``): what its runtimes list as
    its own, so that two appliances sharing a data folder or a Docker daemon never stop each other's."""
    return f"hearth-{settings.HEARTH_INSTANCE[:6]}-"


def get_runtime(name: str | None = None) -> Runtime:
    """The runtime named ``name`` (default: HEARTH_RUNTIME). Raises ValueError for an unknown name."""
    name = name or settings.HEARTH_RUNTIME
    if name == "process":
        from appliance.runtimes.process import ProcessRuntime

        return ProcessRuntime(settings.DATA_DIR / "engines", settings.HEARTH_ENGINE_ENV, engine_name_prefix())
    if name == "docker":
        return _docker_runtime()
    raise ValueError(f"unknown runtime {name!r} (use process or docker)")


@functools.cache
def _docker_runtime() -> Runtime:
    """One Docker client per process: reconcile asks for the runtime of every replica on every tick.
    Not cached when the daemon does not answer (the constructor raises), so a later call tries again."""
    from appliance.runtimes.docker import DockerRuntime

    return DockerRuntime()
