"""GPU devices and inventories: read from NVML (appliance.hardware) or from a simulated box profile.

Simulated boxes are data: real machines' GPUs with the total memory NVML reports for them
(``nvidia-smi``'s "MiB" figure x 2^20), so a plan made on a profile matches the real box.
"""

from dataclasses import dataclass, field

MIB = 1024**2


@dataclass(frozen=True)
class GpuDevice:
    """One GPU. Memory in bytes; ``memory_used_bytes`` is held by other processes now (counts as used)."""

    index: int
    name: str
    uuid: str
    memory_total_bytes: int
    memory_used_bytes: int
    compute_capability: tuple[int, int]

    @property
    def supports_fp8_kv(self) -> bool:
        """FP8 KV cache needs Ada (8.9), Hopper (9.0) or Blackwell (10.x, 12.x) (vLLM docs, "FP8 KV Cache")."""
        return self.compute_capability >= (8, 9)


@dataclass(frozen=True)
class Inventory:
    """The GPUs in force and where they came from: ``"nvml"``, ``"sim:<profile>"`` or ``"none"``; ``origin`` the
    process that read it ("" = this one; e.g. "the worker on gpu-box") and ``read_at`` when (Unix seconds)."""

    source: str
    devices: list[GpuDevice] = field(default_factory=list)
    origin: str = ""
    read_at: float | None = None

    def provenance(self, now: float) -> str:
        """Where and how long ago the inventory was read, in words: "read by the worker on gpu-box 3 s ago"."""
        who = self.origin or "this process"
        if self.read_at is None:
            return f"read by {who}"
        return f"read by {who} {max(now - self.read_at, 0.0):.0f} s ago"

    @property
    def simulated(self) -> bool:
        return self.source.startswith("sim:")

    def describe(self) -> str:
        if not self.devices:
            return "No GPUs (CPU engines only)"
        names = {d.name for d in self.devices}
        gib = self.devices[0].memory_total_bytes / 1024**3
        what = f"{len(self.devices)}× {' / '.join(sorted(names))} ({gib:.1f} GiB each)"
        return f"{what}, simulated ({self.source[4:]})" if self.simulated else f"{what}, read from NVML"


@dataclass(frozen=True)
class BoxProfile:
    gpu_name: str
    memory_mib: int
    compute_capability: tuple[int, int]
    count: int


# Total memory as nvidia-smi / NVML report it for each GPU model (MiB).
SIM_PROFILES: dict[str, BoxProfile] = {
    "1xRTX4090-24GB": BoxProfile("NVIDIA GeForce RTX 4090", 24_564, (8, 9), 1),
    "1xL40S-48GB": BoxProfile("NVIDIA L40S", 46_068, (8, 9), 1),
    "1xA100-80GB": BoxProfile("NVIDIA A100-SXM4-80GB", 81_920, (8, 0), 1),
    "2xA100-80GB": BoxProfile("NVIDIA A100-SXM4-80GB", 81_920, (8, 0), 2),
    "8xA100-80GB": BoxProfile("NVIDIA A100-SXM4-80GB", 81_920, (8, 0), 8),
    "1xH100-80GB": BoxProfile("NVIDIA H100 80GB HBM3", 81_559, (9, 0), 1),
    "2xH100-80GB": BoxProfile("NVIDIA H100 80GB HBM3", 81_559, (9, 0), 2),
    "4xH100-80GB": BoxProfile("NVIDIA H100 80GB HBM3", 81_559, (9, 0), 4),
    "8xH100-80GB": BoxProfile("NVIDIA H100 80GB HBM3", 81_559, (9, 0), 8),
    "1xH200-141GB": BoxProfile("NVIDIA H200", 143_771, (9, 0), 1),
    "2xL40S-48GB": BoxProfile("NVIDIA L40S", 46_068, (8, 9), 2),
    "4xL40S-48GB": BoxProfile("NVIDIA L40S", 46_068, (8, 9), 4),
    "2xRTX4090-24GB": BoxProfile("NVIDIA GeForce RTX 4090", 24_564, (8, 9), 2),
    "8xH200-141GB": BoxProfile("NVIDIA H200", 143_771, (9, 0), 8),
    "1xB200": BoxProfile("NVIDIA B200", 183_359, (10, 0), 1),
    "8xB200": BoxProfile("NVIDIA B200", 183_359, (10, 0), 8),
    # The boxes of published vLLM startup logs (tests/data/vllm_gpu_kv_logs.json); nvidia-smi's MiB as
    # quoted beside those logs or by other hosts' nvidia-smi output (found with the search tool's find_string).
    "1xRTX3090-24GB": BoxProfile("NVIDIA GeForce RTX 3090", 24_576, (8, 6), 1),
    "1xRTX5090-32GB": BoxProfile("NVIDIA GeForce RTX 5090", 32_607, (12, 0), 1),
    "1xA100-40GB": BoxProfile("NVIDIA A100-SXM4-40GB", 40_960, (8, 0), 1),
    "2xRTXPRO6000-96GB": BoxProfile("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97_887, (12, 0), 2),
}


def simulated_inventory(profile: str) -> Inventory:
    """The inventory of a simulated box. Raises KeyError naming the known profiles."""
    box = SIM_PROFILES.get(profile)
    if box is None:
        raise KeyError(f"unknown GPU profile {profile!r}; known: {', '.join(SIM_PROFILES)}")
    devices = [
        GpuDevice(i, box.gpu_name, f"GPU-sim-{profile}-{i}", box.memory_mib * MIB, 0, box.compute_capability)
        for i in range(box.count)
    ]
    return Inventory(f"sim:{profile}", devices)
