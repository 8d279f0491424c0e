"""The GPU strip: each GPU's memory, utilisation, power and temperature, as the worker (which holds the GPUs)
reads them from NVML and publishes them with its inventory (appliance.hardware.publish); on a simulated box,
values derived from the simulator's load, labelled simulated.

Simulated telemetry (an assumption, shown as such): a GPU holds what the engines on it hold by engines.room's rule
(console.deployments.gpu_holds): an awake engine its plan's share for vLLM, the CUDA context and graphs, an asleep
one 1.4 GiB; its utilisation is 0 with no request running, else 0.55 + 0.45 × running / max_num_seqs of the
replica; power = TDP × (0.1 + 0.9 × utilisation); temperature = 30 + 45 × utilisation °C. TDPs (``TDP_WATTS``) are
the NVIDIA datasheets' maximum board power for each model. On every box the strip names the deployments on each GPU
and what each holds (``holders``).
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
from console.deployments import gpu_holds
from console.deployments.models import ASLEEP_STATES, Deployment, DeploymentState
from console.observability.models import MetricSample, Resolution
from console.observability.swaps import state_class, state_label
from engines.gpus import Inventory
from engines.room import asleep_bytes_per_gpu

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


RUNNING = (DeploymentState.LOADING, DeploymentState.READY, *ASLEEP_STATES, DeploymentState.STOPPING)


def _engines() -> list[tuple[Deployment, tuple[int, ...], int]]:
    """Each deployment whose engines run now, its GPUs and the bytes it holds on each (asleep: its residue)."""
    out = []
    for hold in gpu_holds.holds():
        dep = hold.dep
        if dep.state in RUNNING:
            held = asleep_bytes_per_gpu(hold.awake_bytes) if dep.state == DeploymentState.ASLEEP else hold.awake_bytes
            out.append((dep, hold.gpus, held))
    return out


def _load() -> dict[int, tuple[int, float]]:
    """GPU index → (bytes Hearth's engines hold, utilisation 0–1) from the running deployments and their scrapes."""
    load: dict[int, tuple[int, float]] = {}
    for dep, indices, held in _engines():
        ready = dep.state == DeploymentState.READY
        per_replica = max(1, len(indices) // max(dep.replica_count, 1))
        running = _running_by_replica(dep) if ready else []
        seqs = float(dep.stored_plan.max_num_seqs or 256)
        for n, index in enumerate(indices):
            busy = running[n // per_replica] if n // per_replica < len(running) else 0.0
            util = 0.0 if busy <= 0 else min(1.0, 0.55 + 0.45 * busy / seqs)
            before, was = load.get(index, (0, 0.0))
            load[index] = (before + held, max(was, util))
    return load


def holders() -> dict[int, list[tuple[str, str, str, int]]]:
    """GPU index → each deployment on it: its name, its state in words and their CSS class, the bytes it holds
    there."""
    out: dict[int, list[tuple[str, str, str, int]]] = {}
    for dep, indices, held in _engines():
        for index in indices:
            out.setdefault(index, []).append((dep.name, state_label(dep), state_class(dep), held))
    for found in out.values():
        found.sort(key=lambda h: h[2] == "asleep")  # the awake one first: it colours the GPU's bar
    return out


def _running_by_replica(dep: Deployment) -> list[float]:
    """Running requests of each replica (by id order) in its last scrape."""
    out = []
    for replica_id in dep.replicas.filter(running=True).order_by("id").values_list("id", flat=True):
        row = (
            MetricSample.objects.filter(replica_id=replica_id, resolution=Resolution.SCRAPE)
            .order_by("-at")
            .values_list("values", flat=True)
            .first()
        )
        out.append(float((row or {}).get("v", {}).get("requests_running", 0.0)))
    return out


def simulated_telemetry(inventory: Inventory, load: dict[int, tuple[int, float]]) -> list[GpuTelemetry]:
    """Telemetry of a simulated box under ``load``, GPU index → (bytes held, utilisation) (module docstring's
    formulas)."""
    out = []
    for d in inventory.devices:
        held, util = load.get(d.index, (0, 0.0))
        tdp = TDP_WATTS.get(d.name)
        out.append(
            GpuTelemetry(
                d.index,
                d.name,
                min(held, d.memory_total_bytes),
                d.memory_total_bytes,
                util,
                None if tdp is None else round(tdp * (0.1 + 0.9 * util), 1),
                tdp,
                round(30 + 45 * util, 1),
                True,
            )
        )
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
