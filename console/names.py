"""Names users give things (models, deployments, served model names, keys) and the integer range the
database holds, checked the same way in every domain."""

import re

from console.errors import ConsoleError

INT_MAX = 2**31 - 1  # PostgreSQL's integer column
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
SERVED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$")  # e.g. meta-llama/Llama-3.1-8B-Instruct


def check_name(name: str, what: str, pattern: re.Pattern[str] = NAME) -> str:
    """The name, stripped; names are case-sensitive, as model names are in the OpenAI API.

    Raises ConsoleError naming ``what`` and the characters allowed, or the length allowed.
    """
    name = name.strip()
    longest = 200 if pattern is SERVED_NAME else 100
    if len(name) > longest:
        raise ConsoleError(f"{what} is {len(name):,} characters long; at most {longest} are allowed.")
    if not pattern.match(name):
        allowed = "'.', '-', '_', ':' or '/'" if pattern is SERVED_NAME else "'.', '-' or '_'"
        raise ConsoleError(
            f"{what} {name!r} must start with a letter or digit and use only letters, digits, {allowed}."
        )
    return name
