"""The known remedy for an engine that ran out of memory, with its numbers (pure).

On a GPU, vLLM's CUDA out-of-memory at start or under load has three well-known levers (vLLM docs,
"Conserving memory" and the troubleshooting guide): leave more of the GPU to others and to PyTorch's
allocator (``gpu_memory_utilization`` down a step; 0.92 → 0.88), let the allocator grow segments
instead of fragmenting (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, PyTorch's CUDA memory
management notes), and cap the sequences run at once (``max_num_seqs``: the sampler's logits and the
CUDA graphs scale with it). On the CPU builds the KV space is the lever (vLLM's ``--kv-cache-memory-bytes``).
"""

from dataclasses import dataclass, field, replace

from engines.launch import CPU_ENGINES, GPU_ENGINES, EngineKind
from engines.planner import GpuPlan
from engines.sizing import BLOCK_SIZE, GIB
from engines.stored_plan import StoredPlan

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
    plan: StoredPlan
    engine_env: dict[str, str] = field(default_factory=dict)
    kv_space_gib: float = 0.0


def _cpu_remedy(engine: str, plan: StoredPlan, engine_env: dict[str, str], kv_space_gib: float) -> Remedy | None:
    """A CPU engine's lever is its KV space, which the plan holds and the launch passes on: vLLM (CPU) its budget in
    bytes (``--kv-cache-memory-bytes``), in whole blocks of its block size; SGLang (CPU) its token capacity
    (``--max-total-tokens``, pages of 1 token). The new plan holds the smaller budget and capacity."""
    space = round(kv_space_gib * KV_SPACE_STEP, 2)
    if space < MIN_KV_SPACE_GIB:
        return None
    why = "the host's memory ran out: a smaller KV cache leaves more of it to the engine's own use"
    new_plan, cpu = plan, plan.cpu
    if cpu and (cpu.kv_bytes_per_token or cpu.kv_capacity_tokens):
        budget, block = int(space * GIB), max(1, cpu.block_size)
        if cpu.kv_bytes_per_token:
            tokens = budget // cpu.kv_bytes_per_token // block * block
        else:  # a plan stored without its bytes per token: the capacity in proportion
            tokens = int(cpu.kv_capacity_tokens * space / kv_space_gib)
        concurrency = round(tokens / max(1, cpu.max_model_len), 2)
        smaller = replace(cpu, kv_budget_bytes=budget, kv_capacity_tokens=tokens, max_concurrency=concurrency)
        new_plan = replace(plan, sizing=smaller)
    flag = "--kv-cache-memory-bytes" if engine == EngineKind.VLLM_CPU else "--max-total-tokens"
    change = Change(f"KV cache space ({flag})", f"{kv_space_gib:g} GiB", f"{space:g} GiB", why)
    return Remedy([change], new_plan, dict(engine_env), space)


def oom_remedy(engine: str, plan: StoredPlan, engine_env: dict[str, str], kv_space_gib: float) -> Remedy | None:
    """The remedy for ``engine`` run with ``plan`` (its stored plan), or None when nothing is left to lower
    (utilization at its floor, expandable segments already on, max_num_seqs at its floor) or it has no GPU
    plan to lower."""
    if engine in CPU_ENGINES:
        return _cpu_remedy(engine, plan, engine_env, kv_space_gib)
    gpu = plan.gpu
    if engine not in GPU_ENGINES or gpu is None:
        return None
    changes: list[Change] = []
    new_gpu, env = gpu, dict(engine_env)
    util = gpu.gpu_memory_utilization
    if util - UTILIZATION_STEP >= MIN_UTILIZATION:
        lost = _kv_tokens_lost(gpu)
        new_gpu = replace(
            new_gpu,
            gpu_memory_utilization=round(util - UTILIZATION_STEP, 2),
            kv_capacity_tokens=max(gpu.kv_capacity_tokens - lost, 0) // BLOCK_SIZE * BLOCK_SIZE,
        )
        changes.append(
            Change(
                "gpu_memory_utilization",
                f"{util:.2f}",
                f"{new_gpu.gpu_memory_utilization:.2f}",
                "leaves more memory to other processes, PyTorch's allocator and CUDA graphs"
                + (f"; the KV cache holds {lost:,} fewer tokens" if lost else ""),
            )
        )
    if EXPANDABLE not in env.get(ALLOC_CONF, ""):
        env[ALLOC_CONF] = ",".join(filter(None, [env.get(ALLOC_CONF, ""), EXPANDABLE]))
        changes.append(
            Change(
                ALLOC_CONF,
                engine_env.get(ALLOC_CONF, "unset"),
                env[ALLOC_CONF],
                "the allocator grows segments instead of fragmenting memory",
            )
        )
    seqs = gpu.max_num_seqs
    if seqs // 2 >= MIN_MAX_NUM_SEQS:
        new_gpu = replace(new_gpu, max_num_seqs=seqs // 2)
        changes.append(
            Change(
                "max_num_seqs",
                str(seqs),
                str(seqs // 2),
                "fewer sequences at once: smaller sampler buffers and fewer CUDA graphs",
            )
        )
    return Remedy(changes, replace(plan, sizing=new_gpu), env, kv_space_gib) if changes else None


def _kv_tokens_lost(plan: GpuPlan) -> int:
    """KV tokens the utilization step takes away: the step's bytes on each of the TP GPUs (the plan's
    memory split gives one GPU's total) over the model's KV bytes per token (0 without a split)."""
    gpu_memory = plan.split.total if plan.split else 0
    if not gpu_memory or not plan.kv_bytes_per_token:
        return 0
    return int(UTILIZATION_STEP * gpu_memory * plan.tensor_parallel_size // plan.kv_bytes_per_token)
