"""The GPU inventory in force: ``HEARTH_GPU_INVENTORY`` = ``sim:<profile>`` | ``nvml`` | ``auto`` (default).

``auto`` reads NVML when a driver is present and reports no GPUs otherwise; ``nvml`` insists on it.
NVML is reached through nvidia-ml-py (``pynvml``); memory used by other processes counts as used.
"""

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


def read_nvml() -> Inventory:
    """Every GPU NVML sees. Raises InventoryError when no NVIDIA driver answers."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise InventoryError(f"NVML is not available: {exc}") from None
    try:
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
    finally:
        pynvml.nvmlShutdown()
