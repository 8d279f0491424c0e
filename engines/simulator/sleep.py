"""vLLM 0.32.0's sleep mode, simulated: the state its engine keeps, what each call does to it, how long each takes
and the memory it holds (engines/simulator/SLEEP.md has the facts and their sources).

State as vLLM keeps it: the scheduler's pause (vllm/v1/engine/core.py ``pause_scheduler``: admission stops for
modes "abort" and "wait", every step for "keep") and the executor's sleeping tags (vllm/v1/executor/abstract.py:
``{"weights", "kv_cache"}`` after a sleep of level 1 or 2, taken off by ``wake_up``, all of them or the ones named).
Simulated beside it: which of those allocations are mapped on the GPUs (``resident``), whether the weights have a
copy in host RAM (a level-1 sleep makes one) and whether the weights on the GPUs are the checkpoint's (not after a
level-2 sleep until ``reload_weights``). Without ``--enable-sleep-mode`` vLLM's sleep pool is empty: a sleep pauses
and marks the tags, and releases, copies and discards nothing.

Sizes in bytes, totals over the engine's ``gpus`` (each holds an even share); times in seconds:

- a level-1 sleep copies each GPU's share of the weights to host RAM: ``weights / gpus / host bandwidth``; a level-2
  sleep discards them (no copy);
- a wake maps the memory back, ``WAKE_BASE_SECONDS``, and after level 1 copies the weights back, ``weights / gpus /
  host bandwidth`` (each GPU over its own link);
- ``reload_weights`` (after level 2) reads the checkpoint, ``RELOAD_BASE_SECONDS + weights / disk bandwidth`` (one
  disk for every rank).

The defaults fit the vLLM blog's A100 measurements ("Zero-Reload Model Switching with vLLM Sleep Mode", 2025-10-26,
vLLM 0.11.0; vllm-project/vllm-project.github.io _posts/2025-10-26-sleep-mode.md): level-1 wakes of Qwen3-0.6B
(~1.5 GB of bf16 weights) and Phi-3-vision-128k (~8.3 GB) took 0.26 s and 0.82 s, so 0.14 s + 12 GB/s (pinned host
memory over PCIe 4.0 x16, 25 GB/s a direction on paper); level-2 wakes (wake_up, reload_weights, reset_prefix_cache)
took 0.85 s and 2.58 s, so 0.14 s + 0.3 s + 3.9 GB/s (safetensors from the page cache or an NVMe disk).

GPU memory awake is ``gpu_memory_bytes`` (what vLLM takes of its GPUs, ``--gpu-memory-utilization`` of each); asleep
``RESIDUAL_BYTES_PER_GPU`` a GPU stays held (the CUDA context, NCCL and whatever vLLM allocated outside its sleep
pool); a partly woken engine holds the residue plus the weights and/or the rest (KV cache, activations, graphs).
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator

from engines.simulator.config import SimConfig
from engines.simulator.scheduler import Engine

log = logging.getLogger("engines.simulator")

TAGS = ("weights", "kv_cache")  # vllm/v1/executor/abstract.py SLEEP_TAGS
MODES = ("abort", "wait", "keep")  # vllm/v1/engine/__init__.py PauseMode
GIB = 1024**3
RESIDUAL_BYTES_PER_GPU = int(1.4 * GIB)  # one H100 measurement: 73.9 -> 1.4 GiB asleep (ai-dynamo/dynamo#11233)
WAKE_BASE_SECONDS = 0.14  # the blog's fit, above
RELOAD_BASE_SECONDS = 0.3  # the blog's fit, above
# What a failed wake says: cumem's error when the memory it maps back is gone (verl and vLLM issue reports), as
# vLLM's engine core wraps a failed call (vllm/v1/engine/core.py) and its error handler strips the path.
WAKE_OOM = "Call to wake_up method failed: CUDA Error: out of memory at <path>:139"


class WakeFailed(Exception):
    """A wake that failed; the message is vLLM's. The engine stays asleep (is_sleeping true)."""


class Sleeper:
    """The sleep state of one engine; each operation runs alone, in arrival order, as vLLM's engine core runs its
    utility calls."""

    def __init__(
        self, cfg: SimConfig, engine: Engine, wait: Callable[[float], Awaitable[None]] = asyncio.sleep
    ) -> None:
        """``wait`` spends the simulated seconds (tests record them instead)."""
        self.cfg = cfg
        self.engine = engine
        self._wait = wait
        self.tags: set[str] = set()  # the executor's sleeping tags
        self.resident: set[str] = set(TAGS)  # allocations mapped on the GPUs
        self.host_copy = False  # the weights are in host RAM (level 1)
        self.weights_loaded = True  # the GPUs' weights are the checkpoint's
        self.resumed = asyncio.Event()  # set while the scheduler runs
        self.resumed.set()
        self._lock = asyncio.Lock()
        self._failures_left = cfg.fault_wake_fails

    @property
    def sleeping(self) -> bool:
        """vLLM's ``is_sleeping``: the scheduler is paused or some tag sleeps (vllm/v1/engine/core.py)."""
        return not self.resumed.is_set() or bool(self.tags)

    async def sleep(self, level: int, mode: str) -> None:
        """``POST /sleep?level=&mode=``: pause the scheduler (``mode``: "abort" ends every request in flight,
        "wait" lets the running ones finish first, "keep" freezes them), reset the prefix cache (level 1 or 2),
        then release the GPU memory (level 1 or 2; nothing when the executor sleeps already)."""
        async with self._lock:
            if mode == "abort":
                self.engine.abort_all()
            self.engine.pause("all" if mode == "keep" else "new")
            self.resumed.clear()
            if mode == "wait":
                await self.engine.drained()
            if level >= 1:
                self.engine.forget_prefixes()
                await self._release(level)

    async def _release(self, level: int) -> None:
        if "weights" in self.tags:
            log.warning("Executor is already sleeping.")
            return
        seconds = self._copy_seconds() if level == 1 and self.cfg.enable_sleep_mode else 0.0
        await self._wait(seconds)
        before = self.gpu_bytes()
        if self.cfg.enable_sleep_mode:
            self.host_copy = level == 1 and "weights" in self.resident
            self.weights_loaded = self.weights_loaded and level == 1
            self.resident.clear()
        self.tags = set(TAGS)
        freed, held = (before - self.gpu_bytes()) / GIB, self.gpu_bytes() / GIB
        log.info("Sleep mode freed %.2f GiB memory, %.2f GiB memory is still in use.", freed, held)
        log.info("It took %.6f seconds to fall asleep.", seconds)

    async def wake_up(self, tags: list[str] | None) -> bool:
        """``POST /wake_up[?tags=...]``: map back the tags named (all when None) and resume the scheduler once none
        sleeps; "scheduling" alone resumes a level-0 sleep. Returns whether the engine is fully awake.

        A tag that does not sleep makes the whole call do nothing (vLLM logs a warning and answers 200). Raises
        WakeFailed under ``--fault-wake-fails``: the weights were mapped and copied back, the KV cache was not, and
        the tags still sleep, as after a real out-of-memory in the middle of a wake.
        """
        async with self._lock:
            if tags is not None and "scheduling" in tags:
                tags = [t for t in tags if t != "scheduling"]
            if tags is None or tags:
                await self._map(tags)
            awake = not self.tags
            if awake:
                self.engine.pause(None)
                self.resumed.set()
                if not self.weights_loaded:
                    log.warning("Awake after a level-2 sleep without reload_weights: a real vLLM answers garbage now")
            return awake

    async def _map(self, tags: list[str] | None) -> None:
        if not self.tags:
            log.warning("Executor is not sleeping.")
            return
        for tag in tags or ():
            if tag not in self.tags:
                log.warning("Tag %s is not in sleeping tags %s", tag, self.tags)
                return
        waking = set(tags) if tags else set(self.tags)
        started = time.monotonic()
        if self._failures_left:
            if self._failures_left > 0:
                self._failures_left -= 1
            await self._map_weights(waking - {"kv_cache"})
            log.error("Wake-up failed: CUDA Error: out of memory (simulated fault --fault-wake-fails)")
            raise WakeFailed(WAKE_OOM)
        await self._map_weights(waking)
        if self.cfg.enable_sleep_mode and "kv_cache" in waking:
            self.resident.add("kv_cache")
        self.tags -= waking
        log.info("It took %.6f seconds to wake up tags %s.", time.monotonic() - started, sorted(waking))

    async def _map_weights(self, waking: set[str]) -> None:
        """Map the allocations ``waking`` names that are not mapped yet, copying the weights back from host RAM
        (after level 1); the wake's fixed cost comes first."""
        if not self.cfg.enable_sleep_mode or not waking - self.resident:
            return
        await self._wait(WAKE_BASE_SECONDS)
        if "weights" in waking - self.resident:
            await self._wait(self._copy_seconds() if self.host_copy else 0.0)
            self.resident.add("weights")
            self.host_copy = False

    async def reload_weights(self) -> None:
        """``POST /collective_rpc {"method": "reload_weights"}``: read the checkpoint into the GPUs' weights.

        Raises RuntimeError while the weights are not mapped (a real vLLM would write to unmapped memory).
        """
        async with self._lock:
            if self.cfg.enable_sleep_mode and "weights" not in self.resident:
                raise RuntimeError("the weights sleep: wake_up?tags=weights first (simulator's refusal)")
            await self._wait(RELOAD_BASE_SECONDS + self.cfg.weights_bytes / (self.cfg.sleep_disk_gb_per_s * 1e9))
            self.weights_loaded = True

    def forget_prefixes(self) -> bool:
        """``POST /reset_prefix_cache``: False while requests hold KV blocks."""
        return self.engine.forget_prefixes()

    def _copy_seconds(self) -> float:
        """One copy of the weights between host RAM and the GPUs, each GPU its share over its own link."""
        return self.cfg.weights_bytes / self.cfg.gpus / (self.cfg.sleep_host_gb_per_s * 1e9)

    def gpu_bytes(self) -> int:
        """What the engine holds on its GPUs now, bytes, all of them together."""
        awake = self.cfg.gpu_memory_bytes
        residue = min(awake, RESIDUAL_BYTES_PER_GPU * self.cfg.gpus)
        weights = min(self.cfg.weights_bytes, awake - residue)
        parts = {"weights": weights, "kv_cache": awake - residue - weights}
        return residue + sum(parts[tag] for tag in self.resident)

    def memory(self) -> Iterator[tuple[str, float]]:
        """The Hearth-only gauges' values: GPU bytes now and awake, host bytes held, weights loaded (1 or 0)."""
        yield "gpu_memory_bytes", self.gpu_bytes()
        yield "gpu_memory_awake_bytes", self.cfg.gpu_memory_bytes
        yield "host_memory_bytes", self.cfg.weights_bytes if self.host_copy else 0
        yield "weights_loaded", 1.0 if self.weights_loaded else 0.0
