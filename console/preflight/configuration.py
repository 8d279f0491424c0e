"""The effective configuration, for the Settings page and the support bundle: every setting README's
"Configuration" table documents, the value this process holds and where it came from, secrets as set or unset.

``EFFECTIVE`` says how to read each setting's value as the console's process holds it (appliance.settings turned
it into a Django setting, sometimes under another name); ``SCRIPTS_ONLY`` names those only the bring-up scripts or
compose.yaml read, whose value this process can show only when its own environment has them.
tests/test_settings_page.py holds the two tables to README's.

A secret's value is never shown: a setting is secret when its name has a word KEY, TOKEN, SECRET, PASSWORD or
WEBHOOK (``SECRET_KEY``, ``HEARTH_METRICS_TOKEN``, ``HEARTH_OIDC_CLIENT_SECRET``, ``HEARTH_HF_TOKEN_FILE``); a URL's
password (``DATABASE_URL``'s, ``REDIS_URL``'s) is replaced by ``***``.
"""

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

SECRET_WORDS = frozenset({"KEY", "TOKEN", "SECRET", "PASSWORD", "WEBHOOK"})
MASK = "***"


def _attr(name: str) -> Callable[[], object]:
    return lambda: getattr(settings, name)


def _image(engine: str) -> Callable[[], object]:
    return lambda: settings.HEARTH_ENGINE_IMAGES[engine]


def database_url() -> str:
    """The database in use as a URL (``postgresql://hearth:***@db:5432/hearth``, ``sqlite:///data/x.sqlite3``),
    its password masked."""
    db = settings.DATABASES["default"]
    engine = str(db["ENGINE"]).rsplit(".", 1)[-1]
    if engine == "sqlite3":
        return f"sqlite:///{db['NAME']}"
    user = f"{db.get('USER') or ''}{':' + MASK if db.get('PASSWORD') else ''}"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"{engine}://{user + '@' if user else ''}{db.get('HOST') or ''}{port}/{db['NAME']}"


def without_password(url: str) -> str:
    """``url`` with the password of its user part replaced by ``***`` (``redis://:***@host:6379/0``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:{MASK}@{host}"))


# README name → the value this process holds (appliance.settings' name for it where it differs).
_SAME_NAME = (
    "SECRET_KEY DEBUG ALLOWED_HOSTS CSRF_TRUSTED_ORIGINS HEARTH_RUNTIME HEARTH_ENGINE_HOST HEARTH_DOCKER_NETWORK "
    "HEARTH_WEIGHTS_VOLUME HEARTH_WEIGHTS_DIR HEARTH_HF_TOKEN_FILE HEARTH_ENGINE_SHM_SIZE HEARTH_STALE_AFTER "
    "HEARTH_RESTART_BACKOFF HEARTH_MAX_RESTARTS HEARTH_INSTANCE HEARTH_VLLM_CPU_PYTHON HEARTH_SGLANG_CPU_PYTHON "
    "HEARTH_VLLM_CPU_KVCACHE_SPACE HEARTH_START_TIMEOUT HEARTH_CACHE_DIR HEARTH_GPU_INVENTORY HEARTH_SCRAPE_INTERVAL "
    "HEARTH_METRICS_TOKEN HEARTH_METRICS_OPEN HEARTH_RECONCILE_INTERVAL HEARTH_PERIODIC_TIME_LIMIT "
    "HEARTH_ACCOUNTING_CHECK_INTERVAL "
    "HEARTH_BATCH_PRICE_FACTOR HEARTH_LANES HEARTH_LANE_HOLD_TIMEOUT HEARTH_LANE_KV_THRESHOLD "
    "HEARTH_BATCH_FILE_MAX_BYTES HEARTH_BATCH_CONCURRENCY HEARTH_BATCH_WAKES_DEPLOYMENTS "
    "HEARTH_STREAM_IDLE_TIMEOUT HEARTH_WEB_WORKERS HEARTH_CONSOLE_WORKERS HEARTH_DRAIN_SECONDS "
    "HEARTH_WORKER_HEALTHCHECK_SECONDS HEARTH_SQLITE_BUSY_SECONDS HEARTH_SSE_KEEPALIVE HEARTH_WAKE_TIMEOUT "
    "HEARTH_MIN_RESIDENCY HEARTH_MAX_BODY_BYTES HEARTH_DOCTOR_MIN_FREE_GIB HEARTH_DOCTOR_WAIT "
    "HEARTH_READY_MIN_FREE_MIB HEARTH_PORT HEARTH_TRUSTED_PROXIES HEARTH_HOSTNAME HEARTH_TLS_CA HEARTH_ACME_EMAIL "
    "HEARTH_EXTERNAL_ALLOW HEARTH_OIDC_ISSUER HEARTH_OIDC_ROLES HEARTH_OIDC_ROLE_CLAIM HEARTH_OIDC_DEFAULT_ROLE "
    "HEARTH_OIDC_LABEL HEARTH_AUDIT_RETENTION_DAYS HEARTH_ENGINE_ENV HEARTH_GATEWAY_URL HEARTH_CAPACITY_MAX_REQUESTS "
    "HEARTH_CAPACITY_MAX_SECONDS HEARTH_ALERT_INTERVAL EMAIL_HOST EMAIL_PORT EMAIL_HOST_USER EMAIL_HOST_PASSWORD "
    "EMAIL_USE_TLS EMAIL_USE_SSL DEFAULT_FROM_EMAIL"
).split()
EFFECTIVE: dict[str, Callable[[], object]] = {name: _attr(name) for name in _SAME_NAME} | {
    "LOG_LEVEL": lambda: logging.getLevelName(logging.getLogger().getEffectiveLevel()),
    "DATABASE_URL": database_url,
    "REDIS_URL": lambda: without_password(settings.REDIS_URL),
    "HEARTH_DATA_DIR": _attr("DATA_DIR"),
    "HEARTH_IMAGE_VLLM": _image("vllm"),
    "HEARTH_IMAGE_SGLANG": _image("sglang"),
    "HEARTH_IMAGE_VLLM_CPU": _image("vllm-cpu"),
    "HEARTH_IMAGE_SIMULATOR": _image("simulator"),
    "HEARTH_HSTS_SECONDS": _attr("SECURE_HSTS_SECONDS"),
    "HEARTH_LOGIN_FAILURE_LIMIT": _attr("AXES_FAILURE_LIMIT"),
    "HEARTH_LOGIN_LOCKOUT_MINUTES": lambda: round(settings.AXES_COOLOFF_TIME.total_seconds() / 60),
    "HEARTH_OIDC_CLIENT_ID": _attr("OIDC_RP_CLIENT_ID"),
    "HEARTH_OIDC_CLIENT_SECRET": _attr("OIDC_RP_CLIENT_SECRET"),
    "HEARTH_OIDC_SCOPES": _attr("OIDC_RP_SCOPES"),
    "HEARTH_OIDC_SIGN_ALGO": _attr("OIDC_RP_SIGN_ALGO"),
    # appliance.web_server sets it for its processes (DATA_DIR/run/prometheus unless given)
    "PROMETHEUS_MULTIPROC_DIR": lambda: (
        os.environ.get("PROMETHEUS_MULTIPROC_DIR") or settings.DATA_DIR / "run" / "prometheus"
    ),
}
# README name → what reads it; the console's process never does.
SCRIPTS_ONLY = {
    "HEARTH_ENGINE_PYTHON": "scripts/setup-vllm-cpu.sh, scripts/setup-sglang-cpu.sh",
    "HEARTH_AGENT_PYTHON": "scripts/install-agent-clis.sh",
    "HEARTH_HOST": "scripts/up.sh",
    "HEARTH_BIND": "compose.yaml",
    "KEEP_ENGINES": "scripts/down.sh",
    "HEARTH_RESTART": "scripts/up.sh sets it for scripts/down.sh",
    "POSTGRES_PASSWORD": "compose.yaml",
    "DOCKER_GID": "compose.yaml",
    "HEARTH_MODELS_DIR": "compose.yaml",
    "GRAFANA_ADMIN_PASSWORD": "compose.yaml",
}


@dataclass(frozen=True)
class Shown:
    """One setting as the page shows it: ``value`` is "set"/"unset" for a secret, the value in words otherwise;
    ``source`` is "environment", "file (NAME_FILE)", "default", or for a script's setting what reads it."""

    name: str
    value: str
    source: str
    secret: bool


def is_secret(name: str) -> bool:
    """Whether a setting's value must never be shown (a word of its name in SECRET_WORDS)."""
    return bool(SECRET_WORDS & set(name.split("_")))


def _words(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "(none)"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "(none)"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value) if value not in ("", None) else "(none)"


def _source(name: str) -> str:
    if os.environ.get(f"{name}_FILE"):
        return f"file ({name}_FILE)"
    if name in os.environ:
        return "environment" if os.environ[name] else "environment (empty: the default)"
    return "default"


def shown(name: str) -> Shown:
    """One documented setting as this process holds it. Raises KeyError for a name neither table lists."""
    secret = is_secret(name)
    if name in SCRIPTS_ONLY:
        raw = os.environ.get(name)
        where = f"read by {SCRIPTS_ONLY[name]} only"
        value = ("set" if raw else "unset") if secret else (raw if raw is not None else "(not in this environment)")
        return Shown(name, value, f"{where}; environment" if raw is not None else where, secret)
    effective = EFFECTIVE[name]()
    value = ("set" if effective else "unset") if secret else _words(effective)
    return Shown(name, value, _source(name), secret)


def configuration() -> list[Shown]:
    """Every documented setting, by name."""
    return [shown(name) for name in sorted({*EFFECTIVE, *SCRIPTS_ONLY})]


def secret_values() -> list[str]:
    """The secret values this process holds (settings and URL passwords), longest first, to keep out of text the
    support bundle copies from elsewhere (log tails)."""
    found = [str(EFFECTIVE[name]()) for name in EFFECTIVE if is_secret(name)]
    found += [os.environ.get(name, "") for name in SCRIPTS_ONLY if is_secret(name)]
    found += [str(settings.DATABASES["default"].get("PASSWORD") or ""), urlsplit(settings.REDIS_URL).password or ""]
    if settings.HEARTH_HF_TOKEN_FILE:  # the token the file holds
        found.append(_read(Path(settings.HEARTH_HF_TOKEN_FILE)))
    return sorted({v for v in found if len(v) >= 4}, key=len, reverse=True)


def redacted(text: str) -> str:
    """``text`` with every secret value this process holds (secret_values) replaced by ``***``."""
    for value in secret_values():
        text = text.replace(value, MASK)
    return text


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
