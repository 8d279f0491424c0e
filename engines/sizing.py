"""Sizing, first cut: KV bytes per token and KV capacity from a memory budget.

Formulas (../shared/DESIGN.md, "Size"):
- KV bytes per token, standard/GQA attention: 2 (K and V) x layers x kv_heads x head_dim x bytes_per_value.
- KV capacity in tokens: budget / kv_bytes_per_token, rounded down to whole blocks of ``block_size``.

For vLLM's CPU build the budget is ``--kv-cache-memory-bytes`` (Hearth passes the plan's) and the block size 128; with
SmolLM2-135M (30 layers, 3 KV heads, head_dim 64, bf16) this gives 23,040 B/token and 46,592 tokens
at 1 GiB, exactly what vLLM 0.32.0 reports at startup (../shared/FACTS.md). SGLang's CPU engine
pages by 1 token (its default ``--page-size``) and takes the capacity itself as ``--max-total-tokens``:
46,603 tokens at 1 GiB, which SGLang 0.5.15.post1 reports as its ``max_total_num_tokens``
(../scripts/sglang-cpu.md).
"""

from dataclasses import dataclass, field

from engines.launch import EngineKind
from engines.modelconfig import DTYPE_BYTES, ModelConfig

GIB = 1024**3
BLOCK_SIZE = 16  # vLLM's default KV block size on GPUs (--block-size)
VLLM_CPU_BLOCK_SIZE = 128  # vLLM's CPU attention backend block size, read back from cache_config_info
SGLANG_PAGE_SIZE = 1  # SGLang's default --page-size (server_args.py), read back from sglang:page_size
# The engine's process tree besides KV cache and weights: vLLM CPU ~3.7-4.0 GiB RSS with 1 GiB KV; SGLang
# CPU 0.5.15.post1 3.9 GiB PSS (5.0 GiB RSS, three processes importing torch) with 1 GiB KV and 0.25 GiB weights.
CPU_ENGINE_OVERHEAD = 3 * GIB
# Per CPU engine: the KV block the capacity is rounded to, and how the budget reaches the engine.
CPU_KV_BLOCK: dict[str, int] = {EngineKind.VLLM_CPU: VLLM_CPU_BLOCK_SIZE, EngineKind.SGLANG_CPU: SGLANG_PAGE_SIZE}
CPU_KV_BUDGET_NAME = {EngineKind.VLLM_CPU: "as --kv-cache-memory-bytes", EngineKind.SGLANG_CPU: "as --max-total-tokens"}
# Tokens per KV block each engine allocates (a sequence of n tokens holds ceil(n / block) blocks); the
# simulator's is its --block-size default (engines.simulator.config), which Hearth does not pass.
KV_BLOCK_TOKENS: dict[str, int] = {
    EngineKind.VLLM: BLOCK_SIZE,
    EngineKind.SGLANG: SGLANG_PAGE_SIZE,
    EngineKind.SIMULATOR: 16,
    **CPU_KV_BLOCK,
}


def kv_block_tokens(engine: str) -> int:
    """Tokens per KV block of ``engine`` (an EngineKind value, KV_BLOCK_TOKENS); 1 for an engine Hearth did
    not launch (an external one: its block size is not known)."""
    return KV_BLOCK_TOKENS.get(engine, 1)


def kv_value_bytes(config: ModelConfig, kv_dtype: str = "auto") -> int:
    """Bytes per cached value: the model's dtype for "auto", one byte for "fp8" (any fp8 variant).

    Raises ValueError for an unknown dtype.
    """
    dtype = config.torch_dtype if kv_dtype == "auto" else kv_dtype
    value_bytes = 1 if dtype.startswith(("fp8", "float8")) else DTYPE_BYTES.get(dtype)
    if value_bytes is None:
        raise ValueError(f"unknown KV cache dtype {dtype!r}")
    return value_bytes


def kv_bytes_per_token(config: ModelConfig, kv_dtype: str = "auto") -> int:
    """Bytes of KV cache one token holds across all attention layers, before any tensor-parallel split.

    - standard / grouped-query attention: 2 (K and V) x layers x kv_heads x head_dim x bytes_per_value;
    - multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2): layers x (kv_lora_rank +
      qk_rope_head_dim) x bytes_per_value (the compressed latent and the decoupled RoPE key; vLLM
      caches exactly this, vllm/attention/backends/mla);
    sliding-window layers are counted as full here (what a paged cache reserves per token); the
    window cap applies per sequence (kv_bytes_per_sequence). Mamba / linear-attention layers hold no
    per-token KV. Raises ValueError for an unknown dtype.
    """
    value_bytes = kv_value_bytes(config, kv_dtype)
    layers = config.layers.attention
    if config.is_mla:
        return layers * (config.kv_lora_rank + config.qk_rope_head_dim) * value_bytes
    return 2 * layers * config.num_key_value_heads * config.head_dim * value_bytes


def kv_bytes_per_sequence(config: ModelConfig, tokens: int, kv_dtype: str = "auto") -> int:
    """Cache bytes one sequence of ``tokens`` tokens holds: full layers for every token, sliding-window
    layers for at most ``window`` tokens, state layers a fixed state (in the model's dtype)."""
    per_token = kv_bytes_per_token(config, kv_dtype)
    mix = config.layers
    if mix.attention == 0:
        sliding_part = 0
    else:
        sliding_part = per_token * mix.sliding // mix.attention
    full_part = per_token - sliding_part
    state = mix.state * mix.state_values * kv_value_bytes(config, "auto")
    return full_part * tokens + sliding_part * min(tokens, mix.window or tokens) + state


@dataclass(frozen=True)
class SizingPlan:
    """What a deployment will hold and why.

    Bytes for memory, tokens for capacity; ``reasons`` are sentences the console shows as they are.
    """

    weights_bytes: int
    kv_bytes_per_token: int
    kv_budget_bytes: int
    block_size: int
    kv_capacity_tokens: int
    max_model_len: int
    max_concurrency: float
    fits: bool
    reasons: list[str] = field(default_factory=list)


def context_beyond_model(config: ModelConfig, max_model_len: int) -> str:
    """Why ``max_model_len`` is longer than the model takes (vLLM refuses to start then), or ""."""
    most = config.max_position_embeddings
    if not most or max_model_len <= most:
        return ""
    return (
        f"Does not fit: max_model_len {max_model_len:,} is longer than the model's own context of {most:,} tokens "
        f"(config.json); vLLM refuses to start with it. Use {most:,} or less."
    )


def plan_cpu(
    config: ModelConfig,
    weights_bytes: int,
    kv_space_gib: float,
    max_model_len: int,
    host_memory_bytes: int = 0,
    engine: str = EngineKind.VLLM_CPU,
) -> SizingPlan:
    """Plan a model on a CPU engine (``engine``: vLLM's or SGLang's) with ``kv_space_gib`` GiB of KV cache.

    vLLM CPU takes the budget as ``--kv-cache-memory-bytes`` and rounds it to blocks of 128 tokens; SGLang
    CPU takes the capacity itself as ``--max-total-tokens`` (pages of 1 token). Raises ValueError for
    an engine Hearth does not know and KeyError for one that is not a CPU engine.

    ``max_model_len`` 0 means the model's own max_position_embeddings. The plan does not fit when the
    KV cache cannot hold one sequence of max_model_len tokens (vLLM refuses to start then), or when the
    KV space, the weights and the engine's own CPU_ENGINE_OVERHEAD exceed ``host_memory_bytes``
    (0: not checked; vLLM checks it against the NUMA node's free memory and exits).
    """
    block = CPU_KV_BLOCK[EngineKind(engine)]
    per_token = kv_bytes_per_token(config)
    budget = int(kv_space_gib * GIB)
    blocks = budget // per_token // block
    capacity = blocks * block
    context = max_model_len or config.max_position_embeddings
    needed = budget + weights_bytes + CPU_ENGINE_OVERHEAD
    fits_memory = not host_memory_bytes or needed <= host_memory_bytes
    beyond_model = context_beyond_model(config, context)
    fits = capacity >= context > 0 and fits_memory and not beyond_model
    reasons = [
        f"Weights: {weights_bytes:,} bytes ({weights_bytes / GIB:.2f} GiB), summed from the checkpoint's "
        "safetensors headers.",
        f"KV cache per token: 2 × {config.layers.attention} layers × {config.num_key_value_heads} KV heads "
        f"× head_dim {config.head_dim} × {DTYPE_BYTES.get(config.torch_dtype, 2)} bytes "
        f"({config.torch_dtype}) = {per_token:,} bytes.",
        f"KV budget: {kv_space_gib:g} GiB ({CPU_KV_BUDGET_NAME[EngineKind(engine)]}) = {budget:,} bytes → "
        + (f"{blocks:,} blocks of {block} tokens = " if block > 1 else "")
        + f"{capacity:,} tokens of KV capacity.",
    ]
    concurrency = capacity / context if context else 0.0
    if beyond_model:
        reasons.append(beyond_model)
    elif not fits_memory:
        room = (host_memory_bytes - weights_bytes - CPU_ENGINE_OVERHEAD) / GIB
        reasons.append(
            f"Does not fit: {kv_space_gib:g} GiB of KV cache, {weights_bytes / GIB:.2f} GiB of weights and about "
            f"{CPU_ENGINE_OVERHEAD / GIB:.0f} GiB for the engine exceed this host's {host_memory_bytes / GIB:.1f} GiB "
            f"of memory. Lower the KV space to {max(room, 0):.1f} GiB or less."
        )
    elif fits:
        reasons.append(f"At max_model_len {context:,} that is {concurrency:.2f} concurrent full-length sequences.")
    else:
        need = -(-context * per_token // GIB)
        shorter = (
            f"Lower max_model_len to {capacity:,} or below, or raise"
            if capacity
            else f"The KV space holds not one block of {block} tokens. Raise"
        )
        reasons.append(
            f"Does not fit: one {context:,}-token sequence needs {context * per_token:,} bytes of KV cache. "
            f"{shorter} the KV space to {need} GiB."
        )
    return SizingPlan(
        weights_bytes=weights_bytes,
        kv_bytes_per_token=per_token,
        kv_budget_bytes=budget,
        block_size=block,
        kv_capacity_tokens=capacity,
        max_model_len=context,
        max_concurrency=round(concurrency, 2),
        fits=fits,
        reasons=reasons,
    )
