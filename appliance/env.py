"""Typed readers for settings from the environment (the healthchecks.io style).

A secret may come from ``NAME_FILE`` (a path, as Docker and compose secrets provide) instead of ``NAME``.
"""

import os
from pathlib import Path


def envstr(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    """True for "1", "true", "yes", "on" (any case); False for "0", "false", "no", "off", "".

    Raises ValueError for anything else, naming the variable.
    """
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean (use true or false)")


def envint(name: str, default: int) -> int:
    raw = os.environ.get(name)
    try:
        return default if raw in (None, "") else int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def envfloat(name: str, default: float) -> float:
    raw = os.environ.get(name)
    try:
        return default if raw in (None, "") else float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None


def envsecret(name: str) -> str:
    """The secret in ``NAME_FILE`` (file contents, stripped) if set, else ``NAME``, else ""."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get(name, "")
