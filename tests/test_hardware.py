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


def test_it_reads_nvml_devices_memory_and_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    class NVMLError(Exception):
        pass

    handles = {0: "h0", 1: "h1"}
    fake = SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=handles.__getitem__,
        nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=150_754_820_096, used=4 << 30 if h == "h1" else 0),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    inventory = read_nvml()
    assert inventory.source == "nvml" and [d.uuid for d in inventory.devices] == ["GPU-h0", "GPU-h1"]
    assert inventory.devices[1].memory_used_bytes == 4 << 30 and inventory.devices[0].supports_fp8_kv
