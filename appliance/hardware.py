"""The GPU inventory in force: ``HEARTH_GPU_INVENTORY`` = ``sim:<profile>`` | ``nvml`` | ``auto`` (default).

``auto`` reads NVML when a driver is present and reports no GPUs otherwise; ``nvml`` insists on it.
NVML is reached through nvidia-ml-py (``pynvml``); memory used by other processes counts as used.
The pre-flight check (appliance.doctor) also reads the driver version and the processes on each GPU here.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from engines.gpus import GpuDevice, Inventory, simulated_inventory


class InventoryError(RuntimeError):
    """The configured inventory cannot be read; the message says which setting to change."""


def current_inventory() -> Inventory:
    """The inventory per HEARTH_GPU_INVENTORY. Raises InventoryError for a bad profile or missing NVML."""
    choice = settings.HEARTH_GPU_INVENTORY
    if choice.startswith("sim:"):
        try:
            return simulated_inventory(choice[4:])
        except KeyError as exc:
            raise InventoryError(f"HEARTH_GPU_INVENTORY: {exc.args[0]}") from None
    if choice not in {"auto", "nvml"}:
        raise InventoryError(f"HEARTH_GPU_INVENTORY={choice!r}: use auto, nvml or sim:<profile>")
    try:
        return read_nvml()
    except InventoryError:
        if choice == "nvml":
            raise
        return Inventory("none")


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
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            devices.append(
                GpuDevice(
                    index=i,
                    name=str(pynvml.nvmlDeviceGetName(handle)),
                    uuid=str(pynvml.nvmlDeviceGetUUID(handle)),
                    memory_total_bytes=int(memory.total),
                    memory_used_bytes=int(memory.used),
                    compute_capability=tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                )
            )
        return Inventory("nvml", devices)


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
