"""The GPU inventory in force: ``HEARTH_GPU_INVENTORY`` = ``sim:<profile>`` | ``nvml`` | ``auto`` (default).

One inventory, where the GPUs are: under compose only the worker is given the GPUs, so the worker publishes the
inventory it reads, with per-GPU telemetry, in Redis every scrape interval (``publish``; the task is
console.observability's). With ``auto``, every process plans against the worker's published inventory while it
is fresh (younger than ``PUBLISHED_FRESH_SCRAPES`` intervals); without one it reads NVML itself when it can,
then falls back to a stale published one (its age shown), else no GPUs. ``nvml`` and ``sim:<profile>`` are
read in this process, as configured. The inventory says where it came from and when (``Inventory.origin``,
``read_at``).

NVML is reached through nvidia-ml-py (``pynvml``); memory used by other processes counts as used. A GPU's total is
what CUDA can allocate: NVML's physical total less the memory the driver reserves for itself (nvmlMemory_v2's
``reserved``; 0.6 GiB on an idle H200 with driver 580, which NVML's first memory call counts as used). vLLM's
``gpu_memory_utilization`` is a share of that same total (torch.cuda.mem_get_info).
The pre-flight check (appliance.doctor) also reads the driver version and the processes on each GPU here.
"""

import functools
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import redis
from django.conf import settings

from appliance.redis_keys import redis_key
from engines.gpus import GpuDevice, Inventory, simulated_inventory

PUBLISHED_FRESH_SCRAPES = 3


class InventoryError(RuntimeError):
    """The configured inventory cannot be read; the message says which setting to change."""


def current_inventory() -> Inventory:
    """The inventory per HEARTH_GPU_INVENTORY (module docstring). Raises InventoryError for a bad profile or
    missing NVML."""
    if settings.HEARTH_GPU_INVENTORY != "auto":
        return local_inventory()
    shared = published()
    if shared is not None and time.time() - (shared.inventory.read_at or 0) <= _fresh_for():
        return shared.inventory
    local = local_inventory()
    return shared.inventory if shared is not None and not local.devices else local


def _fresh_for() -> float:
    return PUBLISHED_FRESH_SCRAPES * float(settings.HEARTH_SCRAPE_INTERVAL) + 1.0


def local_inventory() -> Inventory:
    """The inventory this process reads itself. Raises InventoryError for a bad profile or missing NVML."""
    choice = settings.HEARTH_GPU_INVENTORY
    if choice.startswith("sim:"):
        try:
            inventory = simulated_inventory(choice[4:])
        except KeyError as exc:
            raise InventoryError(f"HEARTH_GPU_INVENTORY: {exc.args[0]}") from None
        return replace(inventory, read_at=time.time())
    if choice not in {"auto", "nvml"}:
        raise InventoryError(f"HEARTH_GPU_INVENTORY={choice!r}: use auto, nvml or sim:<profile>")
    try:
        return read_nvml()
    except InventoryError:
        if choice == "nvml":
            raise
        return Inventory("none", read_at=time.time())


@contextmanager
def _nvml() -> Iterator[Any]:
    """The pynvml module between nvmlInit and nvmlShutdown. Raises InventoryError when no NVIDIA driver answers."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise InventoryError(f"NVML is not available: {exc}") from None
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def read_nvml() -> Inventory:
    """Every GPU NVML sees. Raises InventoryError when no NVIDIA driver answers."""
    with _nvml() as pynvml:
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            total, used = _memory(pynvml, handle)
            devices.append(
                GpuDevice(
                    index=i,
                    name=str(pynvml.nvmlDeviceGetName(handle)),
                    uuid=str(pynvml.nvmlDeviceGetUUID(handle)),
                    memory_total_bytes=total,
                    memory_used_bytes=used,
                    compute_capability=tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                )
            )
        return Inventory("nvml", devices, read_at=time.time())


def _memory(pynvml: Any, handle: Any) -> tuple[int, int]:
    """(total, used) bytes of one GPU as CUDA sees them: the driver's reserved memory is in neither.

    nvmlDeviceGetMemoryInfo_v2 where the driver has it; an older driver's v1 answer as it is (its reserved
    memory then counts as used, the safe side).
    """
    try:
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    except pynvml.NVMLError:
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return int(memory.total), int(memory.used)
    total = int(memory.total) - int(memory.reserved)
    return total, total - int(memory.free)


def driver_version() -> str:
    """The NVIDIA driver's version, e.g. ``"570.124.06"`` (nvmlSystemGetDriverVersion).

    Raises InventoryError when no NVIDIA driver answers.
    """
    with _nvml() as pynvml:
        return str(pynvml.nvmlSystemGetDriverVersion())


@dataclass(frozen=True)
class GpuProcess:
    """A process holding a CUDA context on one GPU, as NVML lists it.

    ``pid`` is in the host's PID namespace; ``name`` is "" when unreadable; ``used_memory_bytes`` is None
    when NVML cannot tell (it reports "not available" e.g. without the privilege to see other users' use).
    """

    gpu_index: int
    pid: int
    name: str
    used_memory_bytes: int | None


def compute_processes() -> list[GpuProcess]:
    """Every compute process on every GPU (nvmlDeviceGetComputeRunningProcesses), GPU by GPU.

    A process using several GPUs appears once per GPU. Raises InventoryError when no NVIDIA driver answers
    or NVML refuses the list.
    """
    with _nvml() as pynvml:
        found = []
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i)):
                    used = proc.usedGpuMemory
                    found.append(GpuProcess(i, int(proc.pid), _process_name(pynvml, int(proc.pid)), used))
        except pynvml.NVMLError as exc:
            raise InventoryError(f"NVML could not list the GPUs' processes: {exc}") from None
        return found


def _process_name(pynvml: Any, pid: int) -> str:
    """NVML's name for ``pid``, else /proc's (same PID namespace only), else ""."""
    try:
        return str(pynvml.nvmlSystemGetProcessName(pid))
    except pynvml.NVMLError:
        pass
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class GpuTelemetry:
    """One GPU now: memory in bytes, utilisation 0–1 (NVML's share of time a kernel ran), power and its limit
    in watts, temperature in °C; None where the GPU does not report it. ``simulated``: derived from the
    simulator's load (console.observability.gpu_strip), not measured."""

    index: int
    name: str
    memory_used_bytes: int
    memory_total_bytes: int
    utilization: float | None
    power_watts: float | None
    power_limit_watts: float | None
    temperature_c: float | None
    simulated: bool = False


def _optional(call: Any, *args: Any) -> Any:
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def read_nvml_telemetry() -> list[GpuTelemetry]:
    """Telemetry of every GPU NVML sees (nvmlDeviceGetUtilizationRates, GetPowerUsage and
    GetEnforcedPowerLimit in milliwatts, GetTemperature). Raises InventoryError when no NVIDIA driver answers."""
    with _nvml() as pynvml:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            total, used = _memory(pynvml, h)
            util = _optional(pynvml.nvmlDeviceGetUtilizationRates, h)
            power = _optional(pynvml.nvmlDeviceGetPowerUsage, h)
            limit = _optional(pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
            temp = _optional(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU)
            out.append(
                GpuTelemetry(
                    i,
                    str(pynvml.nvmlDeviceGetName(h)),
                    used,
                    total,
                    None if util is None else util.gpu / 100,
                    None if power is None else power / 1000,
                    None if limit is None else limit / 1000,
                    None if temp is None else float(temp),
                )
            )
        return out


@dataclass(frozen=True)
class Published:
    """What a worker published: its inventory (with origin and read_at) and its GPUs' telemetry."""

    inventory: Inventory
    telemetry: list[GpuTelemetry]


def published_key() -> str:
    """The Redis key of the published inventory (one function: the namespacing switch)."""
    return redis_key("gpu-inventory")


def _redis() -> redis.Redis:
    return _client(settings.REDIS_URL)


@functools.lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    """One client (and its connection pool) per Redis URL and process: the console reads the inventory on every
    page, and a connection made per read was half its cost."""
    return redis.Redis.from_url(url, socket_timeout=2)


def publish(inventory: Inventory, telemetry: list[GpuTelemetry], process: str = "worker") -> None:
    """Publish this process's inventory and telemetry for the others (the worker's beat task calls it)."""
    body = {
        "source": inventory.source,
        "devices": [asdict(d) for d in inventory.devices],
        "telemetry": [asdict(t) for t in telemetry],
        "read_at": inventory.read_at or time.time(),
        "origin": f"the {process} on {socket.gethostname()} (pid {os.getpid()})",
    }
    _redis().set(published_key(), json.dumps(body))


def published() -> Published | None:
    """The inventory a worker last published, however old; None when none was, or Redis cannot be reached."""
    try:
        raw = _redis().get(published_key())
    except redis.RedisError:
        return None
    if raw is None:
        return None
    body = json.loads(raw)
    devices = [GpuDevice(**{**d, "compute_capability": tuple(d["compute_capability"])}) for d in body["devices"]]
    inventory = Inventory(body["source"], devices, origin=body["origin"], read_at=body["read_at"])
    return Published(inventory, [GpuTelemetry(**t) for t in body.get("telemetry", [])])
