"""The GPU inventory in force: simulated boxes, NVML when present, and plain errors otherwise.

This machine has no NVIDIA driver, so the NVML test drives read_nvml through a stand-in module with
pynvml's own function names: the outermost boundary, and nothing inside it, is replaced.
"""

import sys
from types import SimpleNamespace

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from appliance.hardware import InventoryError, current_inventory, published_key, read_nvml
from engines.gpus import SIM_PROFILES, simulated_inventory

REQUIRED_PROFILES = {
    "1xRTX4090-24GB",
    "1xL40S-48GB",
    "1xA100-80GB",
    "2xA100-80GB",
    "8xH100-80GB",
    "8xH200-141GB",
    "1xB200",
}


def test_the_issue_s_boxes_are_all_profiles() -> None:
    assert REQUIRED_PROFILES <= set(SIM_PROFILES)
    box = simulated_inventory("8xH100-80GB")
    assert len(box.devices) == 8 and box.devices[0].compute_capability == (9, 0)
    assert box.describe() == "8× NVIDIA H100 80GB HBM3 (79.6 GiB each), simulated (8xH100-80GB)"


@override_settings(HEARTH_GPU_INVENTORY="sim:2xA100-80GB")
def test_a_simulated_box_is_in_force_when_configured() -> None:
    assert current_inventory().source == "sim:2xA100-80GB"


@override_settings(HEARTH_GPU_INVENTORY="sim:9xNOPE")
def test_an_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(InventoryError, match="unknown GPU profile '9xNOPE'; known: 1xRTX4090-24GB"):
        current_inventory()


@override_settings(HEARTH_GPU_INVENTORY="auto")
def test_auto_without_a_driver_means_no_gpus() -> None:
    redis.Redis.from_url(settings.REDIS_URL).delete(published_key())  # and no worker published any
    inventory = current_inventory()
    assert inventory.source == "none" and inventory.describe() == "No GPUs (CPU engines only)"


@override_settings(HEARTH_GPU_INVENTORY="nvml")
def test_nvml_insisted_on_without_a_driver_is_an_error() -> None:
    with pytest.raises(InventoryError, match="NVML is not available"):
        current_inventory()


# What NVML answered on a lent H200 (driver 580.159.04, 2026-12-04) with 40 GiB held by one process: the
# physical total, 615 MiB reserved by the driver, and CUDA's own free figure (torch.cuda.mem_get_info) equal to
# total - reserved - used to the byte.
H200_TOTAL = 150_754_820_096
H200_RESERVED = 644_939_776
HELD = 40 << 30


def _stand_in(memory_v2: bool) -> SimpleNamespace:
    class NVMLError(Exception):
        pass

    def memory_info(handle: str, version: int | None = None) -> SimpleNamespace:
        used = HELD if handle == "h1" else 0
        if version is None:  # v1 counts the reserved memory as used
            return SimpleNamespace(total=H200_TOTAL, used=used + H200_RESERVED, free=H200_TOTAL - H200_RESERVED - used)
        if not memory_v2:
            raise NVMLError("Function Not Found")
        free = H200_TOTAL - H200_RESERVED - used
        return SimpleNamespace(total=H200_TOTAL, reserved=H200_RESERVED, used=used, free=free)

    return SimpleNamespace(
        NVMLError=NVMLError,
        nvmlMemory_v2=0x2000028,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex={0: "h0", 1: "h1"}.__getitem__,
        nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlDeviceGetMemoryInfo=memory_info,
    )


def test_it_reads_nvml_devices_memory_and_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _stand_in(memory_v2=True))
    inventory = read_nvml()
    assert inventory.source == "nvml" and [d.uuid for d in inventory.devices] == ["GPU-h0", "GPU-h1"]
    assert inventory.devices[1].memory_used_bytes == HELD and inventory.devices[0].supports_fp8_kv


def test_a_gpu_s_total_is_what_cuda_can_allocate_without_the_driver_s_reserve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _stand_in(memory_v2=True))
    idle, holding = read_nvml().devices
    assert idle.memory_total_bytes == H200_TOTAL - H200_RESERVED and idle.memory_used_bytes == 0
    assert holding.memory_total_bytes - holding.memory_used_bytes == H200_TOTAL - H200_RESERVED - HELD


def test_an_old_driver_without_memory_v2_counts_its_reserve_as_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _stand_in(memory_v2=False))
    idle, _ = read_nvml().devices
    assert idle.memory_total_bytes == H200_TOTAL and idle.memory_used_bytes == H200_RESERVED
