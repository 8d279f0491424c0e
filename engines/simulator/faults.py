"""Per-request faults, asked for by the ``x-sim-fault`` header or a ``[[sim:FAULT]]`` marker in the last
user message (so a client that cannot set headers, e.g. behind a gateway, can still ask).

Several faults may be given, comma-separated in the header or as several markers. The names and what
they do are listed in the package docstring (``engines/simulator/__init__.py``).
"""

import re
from dataclasses import dataclass

MARKER_RE = re.compile(r"\[\[sim:([^\]]+)\]\]")
DEFAULT_CUT_AFTER = 3  # tokens sent before die-mid-stream / drop-mid-stream strike
KNOWN = ("die-mid-stream", "drop-mid-stream", "stall-first", "stall-between", "error-500", "context-length")


class FaultError(ValueError):
    """A fault request the simulator does not understand; the message names the known faults."""


@dataclass(frozen=True)
class Faults:
    """The faults one request asked for.

    ``die_after`` / ``drop_after``: tokens to send before the process exits / the connection is
    closed (None: not asked). ``stall_first`` / ``stall_between``: seconds of silence before the
    first token / between tokens.
    """

    die_after: int | None = None
    drop_after: int | None = None
    stall_first: float = 0.0
    stall_between: float = 0.0
    error_500: bool = False
    context_length: bool = False


def _number(name: str, value: str | None, default: float | None) -> float:
    if value is None:
        if default is None:
            raise FaultError(f"sim fault {name!r} needs a value, e.g. {name}=2")
        return default
    try:
        number = float(value)
    except ValueError:
        raise FaultError(f"sim fault {name!r} wants a number, got {value!r}") from None
    if number < 0:
        raise FaultError(f"sim fault {name!r} wants a number >= 0, got {value!r}")
    return number


def parse_faults(header: str | None, last_user_text: str) -> Faults:
    """Faults from the header value and the markers in ``last_user_text``.

    Raises FaultError for an unknown fault name or a malformed value.
    """
    specs = [s for s in (header or "").split(",") if s.strip()]
    for marker in MARKER_RE.findall(last_user_text):
        specs.extend(s for s in marker.split(",") if s.strip())
    values: dict[str, float | bool] = {}
    for spec in specs:
        name, _, raw = spec.strip().partition("=")
        value = raw.strip() or None
        if name in ("die-mid-stream", "drop-mid-stream"):
            values[name] = _number(name, value, DEFAULT_CUT_AFTER)
        elif name in ("stall-first", "stall-between"):
            values[name] = _number(name, value, None)
        elif name in ("error-500", "context-length"):
            values[name] = True
        else:
            raise FaultError(f"unknown sim fault {name!r}; known: {', '.join(KNOWN)}")
    die, drop = values.get("die-mid-stream"), values.get("drop-mid-stream")
    return Faults(
        die_after=None if die is None else int(die),
        drop_after=None if drop is None else int(drop),
        stall_first=float(values.get("stall-first", 0.0)),
        stall_between=float(values.get("stall-between", 0.0)),
        error_500=bool(values.get("error-500", False)),
        context_length=bool(values.get("context-length", False)),
    )
