"""The model names a key's or a member's ``allowed_models`` may hold: the served model names of the deployments.
They are what the gateway routes by and what it matches a request's ``model`` against a key's allowed_models
with, exactly and case-sensitively (gateway.registry: routes and states keyed by ``served_model_name``;
``KeyEntry.allows``). Any other name lets the key reach nothing, so it is refused, saying which names are served.

Deployments are not access's to import (console's layers, pyproject.toml): the console's shell hands their reader
over when the apps are ready (console.apps.ConsoleConfig.ready), as it assembles the domains' API routers.
"""

from collections.abc import Callable, Collection

from console.errors import ConsoleError

Reader = Callable[[], set[str]]  # every deployment's served model name, read now
_reader: Reader | None = None


def read_with(reader: Reader) -> None:
    """Make ``reader`` the source of the served model names (the shell calls this once, at start)."""
    global _reader
    _reader = reader


def check_served(names: Collection[str], held: Collection[str] = ()) -> None:
    """Nothing when each of ``names`` is served by a deployment or in ``held`` (the key's or member's own
    already, kept so that a deleted deployment does not block changing its other limits; no query when every
    name is held). Raises ConsoleError naming the others and listing the served names."""
    new = set(names) - set(held)
    if not new:
        return
    if _reader is None:
        raise RuntimeError("No reader of served model names: console.apps.ConsoleConfig.ready has not run.")
    served = _reader()
    if unknown := sorted(new - served):
        listed = ", ".join(repr(name) for name in unknown)
        known = ", ".join(sorted(served)) if served else "none yet (leave it empty for every model)"
        raise ConsoleError(f"No deployment serves {listed}. Allowed models are served model names: {known}.")
