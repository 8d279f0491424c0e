"""The known remedy for an engine that ran out of memory, with its numbers (pure).

On a GPU, vLLM's CUDA out-of-memory at start or under load has three well-known levers (vLLM docs,
"Conserving memory" and the troubleshooting guide): leave more of the GPU to others and to PyTorch's
allocator (``gpu_memory_utilization`` down a step; 0.92 → 0.88), let the allocator grow segments
instead of fragmenting (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, PyTorch's CUDA memory
management notes), and cap the sequences run at once (``max_num_seqs``: the sampler's logits and the
CUDA graphs scale with it). On vLLM's CPU build the KV space is the lever (``VLLM_CPU_KVCACHE_SPACE``).
"""

from dataclasses import dataclass, field
from typing import Any

from engines.launch import CPU_ENGINES, GPU_ENGINES, EngineKind
from engines.sizing import BLOCK_SIZE

UTILIZATION_STEP = 0.04  # one step down: 0.92 → 0.88
MIN_UTILIZATION = 0.5
MIN_MAX_NUM_SEQS = 8
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"
KV_SPACE_STEP = 0.75  # the CPU engine's KV space shrinks to three quarters
MIN_KV_SPACE_GIB = 0.25


@dataclass(frozen=True)
class Change:
    """One setting the remedy changes: its name, the value before and after (as shown), and why."""

    name: str
    before: str
    after: str
    why: str


@dataclass(frozen=True)
class Remedy:
    """The changes, and the deployment's plan, engine environment and KV space (GiB) with them applied."""

    changes: list[Change]
    plan: dict[str, Any]
    engine_env: dict[str, str] = field(default_factory=dict)
    kv_space_gib: float = 0.0


def _cpu_remedy(engine: str, plan: dict[str, Any], engine_env: dict[str, str], kv_space_gib: float) -> Remedy | None:
    """A CPU engine's lever is its KV space: vLLM (CPU) reads it from VLLM_CPU_KVCACHE_SPACE at start; SGLang
    (CPU) is given the plan's token capacity (``--max-total-tokens``), so the plan's capacity shrinks with it."""
    space = round(kv_space_gib * KV_SPACE_STEP, 2)
    if space < MIN_KV_SPACE_GIB:
        return None
    why = "the host's memory ran out: a smaller KV cache leaves more of it to the engine's own use"
    new_plan = dict(plan)
    if engine == EngineKind.SGLANG_CPU and plan.get("kv_capacity_tokens"):
        tokens = int(plan["kv_capacity_tokens"] * space / kv_space_gib)  # SGLang pages by 1 token
        new_plan |= {"kv_capacity_tokens": tokens, "max_concurrency": round(tokens / max(1, plan["max_model_len"]), 2)}
    name = "VLLM_CPU_KVCACHE_SPACE" if engine == EngineKind.VLLM_CPU else "KV cache space (--max-total-tokens)"
    return Remedy([Change(name, f"{kv_space_gib:g} GiB", f"{space:g} GiB", why)], new_plan, dict(engine_env), space)


def oom_remedy(engine: str, plan: dict[str, Any], engine_env: dict[str, str], kv_space_gib: float) -> Remedy | None:
    """The remedy for ``engine`` run with ``plan`` (a stored plan dict), or None when nothing is left to
    lower (utilization at its floor, expandable segments already on, max_num_seqs at its floor)."""
    if engine in CPU_ENGINES:
        return _cpu_remedy(engine, plan, engine_env, kv_space_gib)
    if engine not in GPU_ENGINES:
        return None
    changes: list[Change] = []
    new_plan, env = dict(plan), dict(engine_env)
    util = float(plan["gpu_memory_utilization"])
    if util - UTILIZATION_STEP >= MIN_UTILIZATION:
        new_plan["gpu_memory_utilization"] = round(util - UTILIZATION_STEP, 2)
        lost = _kv_tokens_lost(plan)
        new_plan["kv_capacity_tokens"] = max(int(plan["kv_capacity_tokens"]) - lost, 0) // BLOCK_SIZE * BLOCK_SIZE
        changes.append(Change("gpu_memory_utilization", f"{util:.2f}", f"{new_plan['gpu_memory_utilization']:.2f}",
                              "leaves more memory to other processes, PyTorch's allocator and CUDA graphs"
                              + (f"; the KV cache holds {lost:,} fewer tokens" if lost else "")))  # fmt: skip
    if EXPANDABLE not in env.get(ALLOC_CONF, ""):
        env[ALLOC_CONF] = ",".join(filter(None, [env.get(ALLOC_CONF, ""), EXPANDABLE]))
        changes.append(Change(ALLOC_CONF, engine_env.get(ALLOC_CONF, "unset"), env[ALLOC_CONF],
                              "the allocator grows segments instead of fragmenting memory"))  # fmt: skip
    seqs = int(plan["max_num_seqs"])
    if seqs // 2 >= MIN_MAX_NUM_SEQS:
        new_plan["max_num_seqs"] = seqs // 2
        changes.append(Change("max_num_seqs", str(seqs), str(seqs // 2),
                              "fewer sequences at once: smaller sampler buffers and fewer CUDA graphs"))  # fmt: skip
    return Remedy(changes, new_plan, env, kv_space_gib) if changes else None


def _kv_tokens_lost(plan: dict[str, Any]) -> int:
    """KV tokens the utilization step takes away: the step's bytes on each of the TP GPUs (the plan's
    memory split gives one GPU's total) over the model's KV bytes per token (0 without a split)."""
    gpu_memory = int((plan.get("split") or {}).get("total") or 0)
    per_token = int(plan.get("kv_bytes_per_token") or 0)
    if not gpu_memory or not per_token:
        return 0
    return int(UTILIZATION_STEP * gpu_memory * int(plan["tensor_parallel_size"]) // per_token)
