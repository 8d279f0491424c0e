"""The pre-flight check (``manage.py doctor``, the console's Pre-flight page): can this box run engines?

Five checks, each a line with its status and, when it fails, its fix: Docker reachable, an NVIDIA
container runtime, the NVIDIA driver, free disk for the weights cache (sized by the weights still to
download, plus a margin), GPUs free of foreign processes. Each ``*_check`` is a pure function of what was
read; the ``read_*``/``find_*`` functions do the reading (Docker API, NVML, the filesystem); ``run_checks``
joins them under the settings in force.

A check that does not apply is "not used", never a pass, and says why: the Docker checks under
HEARTH_RUNTIME=process (engines run as local processes), the GPU checks with a simulated inventory
(HEARTH_GPU_INVENTORY=sim:…) or on a CPU-only box. "not used" is no failure: the box can be ready with it.
"""

import dataclasses
import os
import re
import shutil
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from django.conf import settings
from docker.errors import DockerException

from appliance.hardware import GpuProcess, InventoryError, compute_processes, driver_version

GIB = 1024**3
PASS, FAIL, NOT_USED = "pass", "fail", "not used"

DOCKER = "Docker"
NVIDIA_RUNTIME = "NVIDIA container runtime"
DRIVER = "NVIDIA driver"
DISK = "Weights cache disk"
GPU_PROCESSES = "GPUs free of other processes"

# Where CDI specs live (Container Device Interface spec, "CDI Spec Directories"); `nvidia-ctk cdi generate`
# writes one of kind nvidia.com/gpu there.
CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
_CDI_GPU_KIND = re.compile(r'"?kind"?\s*:\s*"?nvidia\.com/gpu\b')

DOCKER_FIX = (
    "Start the Docker daemon (sudo systemctl enable --now docker) and let Hearth reach its socket: "
    "compose.yaml mounts /var/run/docker.sock into the worker; elsewhere run as a member of the docker group "
    "or set DOCKER_HOST."
)
NVIDIA_RUNTIME_FIX = (
    "Install the NVIDIA Container Toolkit (package nvidia-container-toolkit, "
    "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html), then run "
    "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker."
)
DRIVER_FIX = (
    "Install the NVIDIA driver for these GPUs (your distribution's nvidia-driver package or "
    "https://www.nvidia.com/drivers), reboot, and check that nvidia-smi lists them; under compose.yaml the "
    "worker reaches NVML through its GPU reservation."
)
GPU_PROCESSES_FIX = (
    "Stop them before launching (nvidia-smi lists them, docker ps finds their containers): Hearth plans "
    "with the memory they hold, and an engine sharing a GPU with them can run out of memory."
)


@dataclass(frozen=True)
class Check:
    """One pre-flight line: what was checked, its ``status`` (PASS, FAIL, or NOT_USED when it does not apply
    to this box), what was found (or why it does not apply), and the fix ("" unless it failed)."""

    name: str
    status: str
    detail: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        """Not a failure: passed, or not used here."""
        return self.status != FAIL

    def as_dict(self) -> dict[str, object]:
        """``{"name", "status", "ok", "detail", "fix"}``."""
        return {**dataclasses.asdict(self), "ok": self.ok}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "Check":
        """The Check ``as_dict`` made."""
        return cls(str(raw["name"]), str(raw["status"]), str(raw["detail"]), str(raw.get("fix", "")))


@dataclass(frozen=True)
class DiskNeed:
    """What the weights cache's disk must hold: ``weights_bytes`` still to download (``what`` names them, ""
    when none), and ``margin_gib`` GiB (2^30 bytes) kept free beyond them."""

    weights_bytes: int = 0
    what: str = ""
    margin_gib: float = 10.0

    @property
    def bytes(self) -> int:
        return self.weights_bytes + int(self.margin_gib * GIB)


@dataclass(frozen=True)
class DockerFacts:
    """What the Docker daemon said, or why it could not be reached (``error`` is "" when it answered).

    ``runtimes`` are ``docker info``'s Runtimes keys; ``cdi_devices`` the IDs of its DiscoveredDevices
    with Source "cdi" (Docker Engine API 1.50+, e.g. ``nvidia.com/gpu=0``; empty on older daemons).
    """

    error: str = ""
    version: str = ""
    api_version: str = ""
    runtimes: tuple[str, ...] = ()
    cdi_devices: tuple[str, ...] = ()


def read_docker(timeout: float = 5.0) -> DockerFacts:
    """Ping the daemon ``docker.from_env()`` finds (DOCKER_HOST, else /var/run/docker.sock) and read its
    version and info; each API call waits at most ``timeout`` seconds. Never raises: errors go in ``error``."""
    client = None
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
        version = client.version()
        info = client.info()
    except (DockerException, OSError) as exc:  # requests' errors are OSErrors
        return DockerFacts(error=str(exc) or type(exc).__name__)
    finally:
        if client is not None:
            client.close()
    devices = info.get("DiscoveredDevices") or []
    return DockerFacts(
        version=str(version.get("Version", "")),
        api_version=str(version.get("ApiVersion", "")),
        runtimes=tuple(sorted(info.get("Runtimes") or {})),
        cdi_devices=tuple(str(d.get("ID", "")) for d in devices if d.get("Source") == "cdi"),
    )


def docker_check(facts: DockerFacts, runtime: str) -> Check:
    """Docker answers; not used when HEARTH_RUNTIME is not ``docker`` (whether a daemon answers then is moot)."""
    if runtime != "docker":
        return Check(DOCKER, NOT_USED, f"HEARTH_RUNTIME={runtime} runs engines as local processes")
    if facts.error:
        return Check(DOCKER, FAIL, f"Docker is not reachable: {facts.error}", DOCKER_FIX)
    return Check(DOCKER, PASS, f"Docker Engine {facts.version} (API {facts.api_version})")


def find_cdi_specs(dirs: Sequence[Path] = CDI_DIRS) -> list[Path]:
    """The CDI spec files (.yaml, .yml, .json) under ``dirs`` that declare kind ``nvidia.com/gpu``.

    Unreadable files and missing folders are skipped.
    """
    found = []
    for folder in dirs:
        for path in sorted(folder.glob("*")):
            if path.suffix not in {".yaml", ".yml", ".json"}:
                continue
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if _CDI_GPU_KIND.search(text):
                found.append(path)
    return found


def nvidia_runtime_check(facts: DockerFacts, cdi_specs: Sequence[Path], runtime: str, inventory: str = "auto") -> Check:
    """Docker can give containers GPUs: its ``nvidia`` runtime, CDI devices it discovered, or CDI spec files.
    Not needed with a simulated inventory (demo mode gives no container a GPU)."""
    found = []
    if "nvidia" in facts.runtimes:
        found.append('Docker runtime "nvidia"')
    if facts.cdi_devices:
        found.append(f"CDI devices {', '.join(facts.cdi_devices)}")
    if cdi_specs:
        found.append(f"CDI specs {', '.join(str(p) for p in cdi_specs)}")
    if runtime != "docker":
        return Check(NVIDIA_RUNTIME, NOT_USED, f"HEARTH_RUNTIME={runtime} gives no container a GPU")
    if inventory.startswith("sim:") and not found:
        return Check(NVIDIA_RUNTIME, NOT_USED, f"the GPU inventory is simulated (HEARTH_GPU_INVENTORY={inventory})")
    if found:
        return Check(NVIDIA_RUNTIME, PASS, "; ".join(found))
    seen = "Docker is not reachable" if facts.error else f"Docker's runtimes are {', '.join(facts.runtimes) or 'none'}"
    dirs = " or ".join(str(d) for d in CDI_DIRS)
    detail = f"none: {seen}, and no CDI spec for nvidia.com/gpu in {dirs}"
    return Check(NVIDIA_RUNTIME, FAIL, detail, NVIDIA_RUNTIME_FIX)


def driver_check(version: str, error: str, inventory: str, runtime: str) -> Check:
    """The NVIDIA driver answers NVML with ``version`` (``error`` says why not when it does not).

    Not used with a simulated inventory, nor on a CPU-only box (inventory ``auto``, process runtime).
    """
    if inventory.startswith("sim:"):
        return Check(DRIVER, NOT_USED, f"the GPU inventory is simulated (HEARTH_GPU_INVENTORY={inventory})")
    if not error:
        return Check(DRIVER, PASS, f"driver {version}")
    if runtime == "docker" or inventory == "nvml":
        return Check(DRIVER, FAIL, f"no NVIDIA driver answers ({error})", DRIVER_FIX)
    where = f"HEARTH_GPU_INVENTORY={inventory}, HEARTH_RUNTIME={runtime}"
    return Check(DRIVER, NOT_USED, f"engines run on CPU ({where}); no driver found: {error}")


def nearest_existing(path: Path) -> Path:
    """``path`` if it exists, else its nearest existing parent (the filesystem it will be created on)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk_check(cache_dir: Path, measured_at: Path, free_bytes: int, total_bytes: int, need: DiskNeed) -> Check:
    """Room on the weights cache's filesystem (measured at ``measured_at``: the cache folder, or its nearest
    existing parent before it is created) for ``need``: the weights still to download plus its margin. GiB
    are 2^30 bytes, as vLLM reports memory."""
    where = str(cache_dir) if measured_at == cache_dir else f"{cache_dir} (not created yet: measured on {measured_at})"
    margin = f"{need.margin_gib:g} GiB margin (HEARTH_DOCTOR_MIN_FREE_GIB)"
    wanted = (
        f"{need.bytes / GIB:.1f} GiB wanted: {need.weights_bytes / GIB:.1f} GiB of weights to download "
        f"({need.what}) + {margin}"
        if need.weights_bytes
        else f"no weights to download, {margin} wanted"
    )
    detail = f"{free_bytes / GIB:.1f} GiB free of {total_bytes / GIB:.1f} GiB at {where}; {wanted}"
    if free_bytes >= need.bytes:
        return Check(DISK, PASS, detail)
    fix = (
        f"Free {(need.bytes - free_bytes) / GIB:.1f} GiB there, or point HEARTH_WEIGHTS_DIR (and Docker's data root, "
        "which holds the weights volume) at a bigger disk."
    )
    return Check(DISK, FAIL, detail, fix)


def read_disk(cache_dir: Path, need: DiskNeed) -> Check:
    """The disk check for ``cache_dir`` as it is now (shutil.disk_usage); a failure if it cannot be measured."""
    measured_at = nearest_existing(cache_dir)
    try:
        usage = shutil.disk_usage(measured_at)
    except OSError as exc:
        return Check(DISK, FAIL, f"cannot measure {measured_at}: {exc}", "Make HEARTH_WEIGHTS_DIR a readable folder.")
    return disk_check(cache_dir, measured_at, usage.free, usage.total, need)


def _describe(proc: GpuProcess) -> str:
    used = "memory unknown" if proc.used_memory_bytes is None else f"{proc.used_memory_bytes / GIB:.1f} GiB"
    return f"GPU {proc.gpu_index}: pid {proc.pid} {proc.name or '(name unreadable)'}, {used}"


def gpu_processes_check(
    processes: Sequence[GpuProcess] | None, hearth_pids: Collection[int], inventory: str, error: str = ""
) -> Check:
    """No compute process on any GPU except Hearth's engines (``hearth_pids``).

    ``processes`` is None when NVML could not list them (``error`` says why): not used, not failed, since
    the driver line carries a missing driver. Not used either with a simulated inventory.
    """
    if inventory.startswith("sim:"):
        return Check(GPU_PROCESSES, NOT_USED, f"the GPU inventory is simulated (HEARTH_GPU_INVENTORY={inventory})")
    if processes is None:
        return Check(GPU_PROCESSES, NOT_USED, f"no GPU processes to read: {error}")
    foreign = [p for p in processes if p.pid not in hearth_pids]
    if foreign:
        return Check(GPU_PROCESSES, FAIL, "; ".join(_describe(p) for p in foreign), GPU_PROCESSES_FIX)
    ours = len(processes)
    return Check(GPU_PROCESSES, PASS, f"no other processes ({ours} of Hearth's engines)" if ours else "no processes")


def container_pids(label_prefix: str = "hearth.") -> set[int]:
    """Host PIDs of every process in running containers with a label starting with ``label_prefix`` (the
    engines Hearth's Docker runtime started), from ``docker top``. Empty when Docker is not reachable."""
    pids: set[int] = set()
    try:
        client = docker.from_env(timeout=5)
        try:
            for container in client.containers.list(ignore_removed=True):
                if any(key.startswith(label_prefix) for key in container.labels):
                    top = container.top()
                    column = top["Titles"].index("PID")
                    pids.update(int(row[column]) for row in top["Processes"] or [])
        finally:
            client.close()
    except (DockerException, OSError, ValueError):
        return pids
    return pids


def session_pids(candidates: Iterable[int], engines_dir: Path) -> set[int]:
    """Those of ``candidates`` in the session of a process-runtime engine (its ``NAME.pid`` files under
    ``engines_dir``; each engine leads its own session). A PID this process cannot see is not counted."""
    leaders = set()
    for pidfile in engines_dir.glob("*.pid"):
        try:
            leaders.add(int(pidfile.read_text()))
        except (OSError, ValueError):
            continue
    found = set()
    for pid in candidates:
        try:
            if os.getsid(pid) in leaders:
                found.add(pid)
        except OSError:
            continue
    return found


def run_checks(disk: DiskNeed | None = None) -> list[Check]:
    """Every check, in order, under the settings in force (HEARTH_RUNTIME, HEARTH_GPU_INVENTORY,
    HEARTH_WEIGHTS_DIR, where Hearth downloads weights); ``disk`` is what the weights cache must hold (default: no
    weights, the margin HEARTH_DOCTOR_MIN_FREE_GIB; the console sizes it by its deployments). Takes a few seconds
    at most; never raises."""
    runtime, inventory = settings.HEARTH_RUNTIME, settings.HEARTH_GPU_INVENTORY
    facts = read_docker()
    checks = [docker_check(facts, runtime), nvidia_runtime_check(facts, find_cdi_specs(), runtime, inventory)]
    version, driver_error, processes_error = "", "", ""
    processes: list[GpuProcess] | None = None
    if not inventory.startswith("sim:"):
        try:
            version = driver_version()
        except InventoryError as exc:
            driver_error = processes_error = str(exc)
        else:
            try:
                processes = compute_processes()
            except InventoryError as exc:
                processes_error = str(exc)
    checks.append(driver_check(version, driver_error, inventory, runtime))
    disk = disk or DiskNeed(margin_gib=settings.HEARTH_DOCTOR_MIN_FREE_GIB)
    checks.append(read_disk(Path(settings.HEARTH_WEIGHTS_DIR), disk))
    ours: set[int] = set()
    if processes:
        ours = container_pids() | session_pids((p.pid for p in processes), Path(settings.DATA_DIR) / "engines")
    checks.append(gpu_processes_check(processes, ours, inventory, processes_error))
    return checks
