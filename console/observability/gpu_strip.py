"""The GPU strip: each GPU's memory, utilisation, power and temperature, as the worker (which holds the GPUs)
reads them from NVML and publishes them with its inventory (appliance.hardware.publish); on a simulated box,
values derived from the simulator's load, labelled simulated.

Simulated telemetry (an assumption, shown as such): a GPU a ready deployment holds has
``gpu_memory_utilization`` of its memory reserved (vLLM reserves that share at start); its utilisation is 0 with
no request running, else 0.55 + 0.45 × running / max_num_seqs of the replica; power = TDP × (0.1 + 0.9 ×
utilisation); temperature = 30 + 45 × utilisation °C. TDPs (``TDP_WATTS``) are the NVIDIA datasheets' maximum
board power for each model.
"""

import time

from django.conf import settings

from appliance.hardware import (
    GpuTelemetry,
    InventoryError,
    Published,
    local_inventory,
    published,
    read_nvml_telemetry,
)
from appliance.hardware import (
    publish as publish_inventory,
)
from console.deployments.models import Deployment, DeploymentState
from console.observability.models import MetricSample, Resolution
from engines.gpus import Inventory

TDP_WATTS = {  # NVIDIA datasheets: SXM/board maximum power
    "NVIDIA H100 80GB HBM3": 700.0,
    "NVIDIA H200": 700.0,
    "NVIDIA A100-SXM4-80GB": 400.0,
    "NVIDIA A100-SXM4-40GB": 400.0,
    "NVIDIA L40S": 350.0,
    "NVIDIA GeForce RTX 4090": 450.0,
    "NVIDIA GeForce RTX 3090": 350.0,
    "NVIDIA GeForce RTX 5090": 575.0,
    "NVIDIA B200": 1000.0,
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": 600.0,
}


def _load() -> dict[int, tuple[float, float]]:
    """GPU index → (memory share reserved, utilisation 0–1) from the ready deployments and their last scrapes."""
    load: dict[int, tuple[float, float]] = {}
    for dep in Deployment.objects.filter(state=DeploymentState.READY):
        indices = [int(i) for i in dep.plan.get("gpu_indices") or []]
        if not indices:
            continue
        share = float(dep.plan.get("gpu_memory_utilization") or 0.9)
        per_replica = max(1, len(indices) // max(dep.replica_count, 1))
        running = _running_by_replica(dep)
        seqs = float(dep.plan.get("max_num_seqs") or 256)
        for n, index in enumerate(indices):
            busy = running[n // per_replica] if n // per_replica < len(running) else 0.0
            util = 0.0 if busy <= 0 else min(1.0, 0.55 + 0.45 * busy / seqs)
            load[index] = (share, util)
    return load


def _running_by_replica(dep: Deployment) -> list[float]:
    """Running requests of each replica (by id order) in its last scrape."""
    out = []
    for replica_id in dep.replicas.filter(running=True).order_by("id").values_list("id", flat=True):
        row = (
            MetricSample.objects.filter(replica_id=replica_id, resolution=Resolution.SCRAPE)
            .order_by("-at").values_list("values", flat=True).first()
        )  # fmt: skip
        out.append(float((row or {}).get("v", {}).get("requests_running", 0.0)))
    return out


def simulated_telemetry(inventory: Inventory, load: dict[int, tuple[float, float]]) -> list[GpuTelemetry]:
    """Telemetry of a simulated box under ``load`` (module docstring's formulas)."""
    out = []
    for d in inventory.devices:
        share, util = load.get(d.index, (0.0, 0.0))
        tdp = TDP_WATTS.get(d.name)
        out.append(GpuTelemetry(
            d.index, d.name, int(d.memory_total_bytes * share), d.memory_total_bytes, util,
            None if tdp is None else round(tdp * (0.1 + 0.9 * util), 1), tdp, round(30 + 45 * util, 1), True,
        ))  # fmt: skip
    return out


def telemetry_here(inventory: Inventory) -> list[GpuTelemetry]:
    """This process's telemetry of its inventory: NVML's, or simulated; none without GPUs."""
    if inventory.source == "nvml":
        return read_nvml_telemetry()
    if inventory.simulated:
        return simulated_telemetry(inventory, _load())
    return []


def publish() -> None:
    """Read this process's inventory and telemetry and publish them (the worker's periodic task)."""
    inventory = local_inventory()
    publish_inventory(inventory, telemetry_here(inventory))


def strip() -> tuple[Published | None, float | None, str]:
    """What the strip shows: the published inventory and telemetry, their age in seconds, and a warning when
    none was published or it is old (the worker is not running)."""
    shared = published()
    if shared is None:
        try:
            inventory = local_inventory()
        except InventoryError as exc:
            return None, None, str(exc)
        return Published(inventory, telemetry_here(inventory)), 0.0, "No worker has published its GPUs yet."
    age = time.time() - (shared.inventory.read_at or 0.0)
    old = age > 3 * settings.HEARTH_SCRAPE_INTERVAL + 1
    return shared, age, f"The worker's GPU reading is {age:.0f} s old: is the worker running?" if old else ""
