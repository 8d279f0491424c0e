"""Django system checks of Hearth's own settings: a mistake in the environment is named, with its fix, by
``manage.py check`` and before every ``manage.py migrate`` (compose's migrate service, which the web server,
worker and beat wait for; scripts/up.sh runs migrate first), instead of a traceback at the first request or
task that reads it.

Ids ``appliance.E0xx``. Registered by console.apps (appliance itself is not an installed app).
"""

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from appliance.address_policy import allowed_networks
from appliance.transport_security import trusted_networks
from engines.gpus import simulated_inventory

RUNTIMES = ("process", "docker")
REDIS_SCHEMES = ("redis", "rediss", "unix")
# Settings that are a count or a length of time: each must be above zero, or the loop or limit it sets
# never runs (a scrape every 0 s) or refuses everything (a 0-byte body).
POSITIVE = (
    "HEARTH_SCRAPE_INTERVAL",
    "HEARTH_RECONCILE_INTERVAL",
    "HEARTH_PERIODIC_TIME_LIMIT",
    "HEARTH_SSE_KEEPALIVE",
    "HEARTH_STREAM_IDLE_TIMEOUT",
    "HEARTH_START_TIMEOUT",
    "HEARTH_WEB_WORKERS",
    "HEARTH_CONSOLE_WORKERS",
    "HEARTH_MAX_BODY_BYTES",
    "HEARTH_RESTART_BACKOFF",
    "HEARTH_STALE_AFTER",
    "HEARTH_VLLM_CPU_KVCACHE_SPACE",
)


@register()
def runtime_and_inventory(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """HEARTH_RUNTIME names a runtime; HEARTH_GPU_INVENTORY is auto, nvml or sim:<a known profile>."""
    found: list[CheckMessage] = []
    if settings.HEARTH_RUNTIME not in RUNTIMES:
        found.append(
            Error(
                f"HEARTH_RUNTIME={settings.HEARTH_RUNTIME!r} is not a runtime Hearth has.",
                hint="Use process (engines as local processes) or docker (engines as containers).",
                id="appliance.E001",
            )
        )
    choice = settings.HEARTH_GPU_INVENTORY
    if choice.startswith("sim:"):
        try:
            simulated_inventory(choice[4:])
        except KeyError as exc:
            found.append(Error(f"HEARTH_GPU_INVENTORY: {exc.args[0]}", id="appliance.E002"))
    elif choice not in ("auto", "nvml"):
        found.append(
            Error(
                f"HEARTH_GPU_INVENTORY={choice!r} is not an inventory.",
                hint="Use auto (NVML, else the worker's), nvml, or sim:<profile> such as sim:8xH100-80GB.",
                id="appliance.E002",
            )
        )
    return found


@register()
def addresses(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """HEARTH_TRUSTED_PROXIES and HEARTH_EXTERNAL_ALLOW are addresses or networks; REDIS_URL is a Redis URL."""
    found: list[CheckMessage] = []
    try:
        trusted_networks(tuple(settings.HEARTH_TRUSTED_PROXIES))
    except ValueError as exc:
        found.append(
            Error(
                str(exc),
                hint="Give addresses or networks, comma-separated: 10.0.0.5,172.18.0.0/16",
                id="appliance.E003",
            )
        )
    try:
        allowed_networks(settings.HEARTH_EXTERNAL_ALLOW)
    except ValueError as exc:
        found.append(Error(str(exc), hint="Give networks, comma-separated: 127.0.0.0/8,fe80::/10", id="appliance.E007"))
    scheme = urlsplit(settings.REDIS_URL).scheme
    if scheme not in REDIS_SCHEMES:
        found.append(
            Error(
                f"REDIS_URL has the scheme {scheme!r}; Hearth's broker, cache and counters need Redis.",
                hint="e.g. redis://127.0.0.1:6379/0",
                id="appliance.E004",
            )
        )
    return found


@register()
def positive_numbers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every setting in POSITIVE is above zero."""
    return [
        Error(f"{name}={getattr(settings, name)!r} must be above zero.", id="appliance.E005")
        for name in POSITIVE
        if getattr(settings, name) <= 0
    ]


@register()
def files_named(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A Hugging Face token file that is named can be read (engines would start without the token)."""
    token = settings.HEARTH_HF_TOKEN_FILE
    if not token or _readable(Path(token)):
        return []
    return [
        Error(
            f"HEARTH_HF_TOKEN_FILE={token!r} is not a file this process can read.",
            hint="Mount the token file there (compose: a secret), or leave HEARTH_HF_TOKEN_FILE empty.",
            id="appliance.E006",
        )
    ]


def _readable(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        with path.open("rb"):
            return True
    except OSError:
        return False
