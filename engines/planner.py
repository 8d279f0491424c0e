"""The GPU sizing planner: a model on an inventory → a plan with its reasons, or why not and what would fit.

Memory per GPU follows vLLM's own accounting (vllm/v1/worker/gpu_worker.py,
``determine_available_memory``): KV cache = total x gpu_memory_utilization - (weights/TP + activation
peak + non-torch memory). CUDA graphs are captured after the KV cache is allocated, out of the
(1 - gpu_memory_utilization) headroom, so the plan checks they fit there. Estimates of the terms vLLM
measures by profiling (activation peak, non-torch, CUDA graphs) are this module's constants, each with
its reason; KV bytes per token come from engines.sizing.

When the request names the vLLM release (``PlanRequest.vllm_version``) the split follows that release
more closely (``accounting``): vLLM's total is CUDA's (cudaMemGetInfo), a little under NVML's; V1 profiles
the forward pass and the sampler one after the other; from v0.21 the estimated CUDA graph memory comes out
of the KV budget. Checked against published vLLM startup logs in tests/data/vllm_gpu_kv_logs.json.
"""

import math
from dataclasses import dataclass, field, replace

from engines.gpus import GpuDevice, Inventory
from engines.modelconfig import ModelConfig
from engines.sizing import BLOCK_SIZE, GIB, context_beyond_model, kv_bytes_per_sequence, kv_bytes_per_token

DEFAULT_UTILIZATION = 0.90  # vLLM's default --gpu-memory-utilization
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default --max-num-seqs
MAX_NUM_BATCHED_TOKENS = 8192  # vLLM V1's default chunked-prefill budget for the OpenAI server on GPUs
NON_TORCH_TP1 = int(0.35 * GIB)  # non-torch allocations after CUDA init, one GPU (vLLM's log, vllm#10517)
NON_TORCH_TPN = int(1.5 * GIB)  # plus NCCL and custom all-reduce buffers when TP > 1
CUDA_GRAPHS = int(1.0 * GIB)  # captured graphs for the default batch sizes; needs headroom, not KV budget
CUDA_CONTEXT = int(0.5 * GIB)  # the CUDA context itself, outside every PyTorch figure
# NVML's total minus what cudaMemGetInfo reports, which is vLLM's total_gpu_memory. Logged pairs (NVML MiB ->
# vLLM GiB): RTX 3090 24,576 -> 23.58 (vllm#10517), RTX 4090 24,564 -> 23.65, RTX 5090 32,607 -> 31.4,
# A100-SXM4-40GB 40,960 -> 39.38 (vllm#16570), RTX PRO 6000 Blackwell 97,887 -> 95.01: 0.34 to 0.62 GiB.
CUDA_RESERVED = int(0.4 * GIB)
# V1 measures non-torch memory as the increase after the CUDA context exists: 0.06-0.12 GiB on one GPU in
# published logs, 0.20-0.43 GiB with tensor parallel (NCCL, custom all-reduce; vllm#13061, vllm#16570).
NON_TORCH_V1_TP1 = int(0.15 * GIB)
NON_TORCH_V1_TPN = int(0.4 * GIB)
# vLLM >= 0.21 subtracts its CUDA graph estimate from the KV budget ("CUDA graph memory profiling is enabled
# (default since v0.21.0)", gpu_worker.py); logged estimates run 0.07-2.4 GiB, 0.3-0.9 for 8B-32B models.
CUDA_GRAPHS_ESTIMATE = int(0.3 * GIB)
TYPICAL_CONTEXT = 32_768  # tokens; a long chat or coding session, for the concurrency the plan reports


@dataclass(frozen=True)
class PlanRequest:
    """The admin's choices; 0 means "let the planner choose"."""

    max_model_len: int = 0
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float = 0.0
    tensor_parallel_size: int = 0
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS  # the profiling forward pass's tokens
    typical_context: int = 0  # tokens; concurrency is reported at this length (default: up to 32,768)
    vllm_version: tuple[int, int] | None = None  # (major, minor) of the engine; None: the planner's older estimate
    enforce_eager: bool = False  # --enforce-eager: no CUDA graphs at all


@dataclass(frozen=True)
class Accounting:
    """How one vLLM release turns a GPU's memory into KV cache. Bytes; see ``accounting``."""

    cuda_reserved: int  # NVML's total minus the total vLLM sees
    non_torch_tp1: int
    non_torch_tpn: int
    sequential_sampler: bool  # the profiling peak is max(forward, sampler), not their sum
    graphs_in_budget: int  # CUDA graph memory taken from the KV budget (0: captured in the headroom)


LEGACY = Accounting(0, NON_TORCH_TP1, NON_TORCH_TPN, False, 0)


def accounting(version: tuple[int, int] | None, enforce_eager: bool = False) -> Accounting:
    """The memory accounting of vLLM ``version``; None keeps the planner's older estimate (NVML's total, a
    non-torch figure that includes the CUDA context, generous tensor-parallel buffers).

    - before 0.8 (the V0 engine): CUDA's total; non-torch includes the CUDA context (0.35 GiB, vllm#10517);
      the sampler is not profiled separately;
    - 0.8 on (V1 is the default engine, vllm/v1/worker/gpu_model_runner.py ``profile_run``: a forward pass
      of max_num_batched_tokens, then a sampler pass): the peak is the larger of the two; non-torch is the
      increase over the CUDA context;
    - 0.21 on: CUDA graph memory is estimated and taken from the KV budget unless ``enforce_eager``.
    """
    if version is None:
        return LEGACY
    if version < (0, 8):
        return Accounting(CUDA_RESERVED, NON_TORCH_TP1, NON_TORCH_V1_TPN, False, 0)
    graphs = CUDA_GRAPHS_ESTIMATE if version >= (0, 21) and not enforce_eager else 0
    return Accounting(CUDA_RESERVED, NON_TORCH_V1_TP1, NON_TORCH_V1_TPN, True, graphs)


@dataclass(frozen=True)
class MemorySplit:
    """One GPU's memory, bytes: what vLLM will hold and what stays free."""

    total: int
    used_by_others: int
    weights: int
    activation: int
    non_torch: int
    kv_cache: int  # negative where the weights and the rest leave none: by how many bytes they overflow
    cuda_graphs: int  # graph memory that must fit in the headroom (0 when the budget already holds it)
    headroom: int
    graphs_in_budget: int = 0  # graph memory taken from the KV budget (vLLM >= 0.21)


@dataclass(frozen=True)
class GpuPlan:
    """A plan for one replica. Bytes for memory, tokens for lengths and capacity; ``reasons`` and
    ``remedies`` are sentences the console shows as they are."""

    fits: bool
    tensor_parallel_size: int
    gpu_indices: list[int]
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    kv_cache_dtype: str
    weights_bytes: int
    kv_bytes_per_token: int
    kv_capacity_tokens: int
    typical_context: int
    concurrency_at_typical_context: float
    split: MemorySplit | None
    reasons: list[str] = field(default_factory=list)
    remedies: list[str] = field(default_factory=list)


def activation_peak(
    config: ModelConfig, tp: int, max_num_seqs: int, batched_tokens: int, sequential: bool = False
) -> int:
    """Estimated peak activation bytes per GPU during vLLM's profiling forward pass.

    Per token about 3 hidden-size and 3 MLP-intermediate vectors are live at the peak (the MLP's
    gate/up output and its activation; split over TP; for MoE, per routed expert), in bf16; the
    sampler then holds fp32 logits for ``max_num_seqs`` sequences (at most one per batched token).
    Calibrated on vLLM's own profiling of Llama-3.1-8B at 20,000 and 29,000 batched tokens (2.07 and
    2.99 GiB; vllm#10517): about 110 KB per token, which this gives. ``sequential``: the two passes
    run one after the other (vLLM V1), so the peak is the larger, not the sum.
    """
    experts = max(config.num_experts_per_tok, 1) if config.num_experts else 1
    per_token = 3 * config.hidden_size + 3 * config.intermediate_size * experts // tp
    forward = batched_tokens * per_token * 2
    sampler = min(max_num_seqs, batched_tokens) * config.vocab_size * 4
    return max(forward, sampler) if sequential else forward + sampler


def kv_bytes_per_token_per_gpu(config: ModelConfig, tp: int, kv_dtype: str) -> int:
    """Per-token KV bytes one GPU holds: the heads split over TP, but never below one KV head per GPU
    (vLLM replicates KV heads when TP exceeds them); MLA's latent cache is whole on every GPU."""
    per_token = kv_bytes_per_token(config, kv_dtype)
    if config.is_mla:
        return per_token
    kv_heads = config.num_key_value_heads
    return per_token * max(kv_heads // tp, 1) // kv_heads if kv_heads >= 1 else per_token


def tp_candidates(config: ModelConfig, gpus: int) -> list[int]:
    """Tensor-parallel sizes that divide the attention heads and fit the GPU count, smallest first."""
    return [tp for tp in (1, 2, 4, 8, 16) if tp <= gpus and config.num_attention_heads % tp == 0]


def _split(config: ModelConfig, weights: int, gpu: GpuDevice, tp: int, util: float, req: PlanRequest) -> MemorySplit:
    acc = accounting(req.vllm_version, req.enforce_eager)
    total = gpu.memory_total_bytes - acc.cuda_reserved
    reserved = int(total * util)
    act = activation_peak(config, tp, req.max_num_seqs, req.max_num_batched_tokens, acc.sequential_sampler)
    non_torch = acc.non_torch_tp1 if tp == 1 else acc.non_torch_tpn
    kv = reserved - weights // tp - act - non_torch - acc.graphs_in_budget
    headroom = total - reserved - gpu.memory_used_bytes - CUDA_CONTEXT
    graphs = 0 if acc.graphs_in_budget or req.enforce_eager else CUDA_GRAPHS
    used = gpu.memory_used_bytes
    return MemorySplit(total, used, weights // tp, act, non_torch, kv, graphs, headroom, acc.graphs_in_budget)


def _utilization(gpus: list[GpuDevice], asked: float) -> float:
    """vLLM refuses to start when free memory is below total x utilization: stay under what is free."""
    if asked:
        return asked
    free_ratio = min((g.memory_total_bytes - g.memory_used_bytes) / g.memory_total_bytes for g in gpus)
    return min(DEFAULT_UTILIZATION, math.floor((free_ratio - 0.01) * 100) / 100)


def _capacity(config: ModelConfig, split: MemorySplit, tp: int, kv_dtype: str) -> int:
    per_gpu = kv_bytes_per_token_per_gpu(config, tp, kv_dtype)
    if split.kv_cache <= 0 or per_gpu == 0:
        return 0
    return split.kv_cache // per_gpu // BLOCK_SIZE * BLOCK_SIZE


def _tp_refusal(config: ModelConfig, tps: list[int], gpus: int) -> str:
    """Why none of ``tps`` can run on ``gpus`` GPUs ("" when the first can): vLLM's tensor parallel size must
    divide the attention heads (vllm/config/parallel.py verify_with_model_config)."""
    heads = config.num_attention_heads
    dividing = [tp for tp in range(1, gpus + 1) if heads % tp == 0]
    if not tps:
        return f"No tensor-parallel size up to {gpus} GPUs divides the model's {heads} attention heads."
    if tps[0] > gpus:
        return f"Tensor parallel {tps[0]} needs {tps[0]} GPUs; {gpus} are free here."
    if heads % tps[0]:
        return (
            f"Tensor parallel {tps[0]} does not divide the model's {heads} attention heads; sizes that do "
            f"on {gpus} GPUs: {', '.join(map(str, dividing))}."
        )
    return ""


def plan_gpu(
    config: ModelConfig, weights_bytes: int, inventory: Inventory, request: PlanRequest, with_remedies: bool = True
) -> GpuPlan:
    """Plan ``config`` (with its real checkpoint bytes) on ``inventory``.

    Picks the smallest tensor-parallel size whose KV cache holds at least one max_model_len sequence.
    With max_model_len unset and the model's own context too long for one sequence, the context is
    shortened to what fits (and the plan says so). Otherwise a plan that does not fit has fits=False
    and remedies with numbers. Raises ValueError for an unknown KV dtype or for FP8 KV on GPUs older
    than compute capability 8.9.
    """
    gpus = inventory.devices
    if not gpus:
        return _refusal(config, weights_bytes, request, "There are no GPUs in this inventory.")
    if request.kv_cache_dtype == "fp8" and not all(g.supports_fp8_kv for g in gpus):
        cc = ".".join(map(str, gpus[0].compute_capability))
        raise ValueError(f"FP8 KV cache needs compute capability 8.9 or newer; {gpus[0].name} is {cc}.")
    util = _utilization(gpus, request.gpu_memory_utilization)
    model_len = request.max_model_len or config.max_position_embeddings or 4096
    if beyond := context_beyond_model(config, model_len):
        return _refusal(config, weights_bytes, request, beyond)
    tps = [request.tensor_parallel_size] if request.tensor_parallel_size else tp_candidates(config, len(gpus))
    if refused := _tp_refusal(config, tps, len(gpus)):
        return _refusal(config, weights_bytes, request, refused)
    plans = [_plan_at(config, weights_bytes, gpus[:tp], tp, util, model_len, request) for tp in tps]
    fitting = [p for p in plans if p.fits]
    if fitting:
        return fitting[0]
    # the most KV cache; where none has any (the weights alone overflow every size), the most GPUs: its reasons show
    # how far the largest split is from fitting, not a one-GPU plan no one asked about
    best = max(plans, key=lambda p: (p.kv_capacity_tokens, p.tensor_parallel_size))
    if not request.max_model_len and best.kv_capacity_tokens >= 1024:
        shorter = best.kv_capacity_tokens // 1024 * 1024
        plan = plan_gpu(config, weights_bytes, inventory, replace(request, max_model_len=shorter))
        note = (
            f"The model's own {model_len:,}-token context does not fit one sequence, so max_model_len is "
            f"{shorter:,}; set it to choose another."
        )
        return replace(plan, reasons=[*plan.reasons, note])
    if not with_remedies:
        return best
    return replace(best, remedies=_remedies(config, weights_bytes, inventory, request, best))


def _plan_at(
    config: ModelConfig, weights: int, gpus: list[GpuDevice], tp: int, util: float, model_len: int, req: PlanRequest
) -> GpuPlan:
    split = min((_split(config, weights, g, tp, util, req) for g in gpus), key=lambda s: s.kv_cache)
    capacity = _capacity(config, split, tp, req.kv_cache_dtype)
    typical = req.typical_context or min(model_len, TYPICAL_CONTEXT)
    per_seq = kv_bytes_per_sequence(config, typical, req.kv_cache_dtype)
    per_token = kv_bytes_per_token(config, req.kv_cache_dtype)
    concurrency = min(capacity * per_token / per_seq if per_seq else 0.0, float(req.max_num_seqs))
    fits = capacity >= model_len and split.headroom >= split.cuda_graphs
    gib = GIB
    reasons = [
        f"Weights: {weights / gib:.2f} GiB, the checkpoint's own tensor bytes"
        + (f", {split.weights / gib:.2f} GiB per GPU at tensor parallel {tp}." if tp > 1 else "."),
        _tp_reason(config, tp, len(gpus)),
        f"Per GPU: {split.total / gib:.1f} GiB × gpu_memory_utilization {util:.2f} = "
        f"{split.total * util / gib:.1f} GiB for vLLM; minus weights {split.weights / gib:.2f}, activation peak "
        f"{split.activation / gib:.2f} (a {req.max_num_batched_tokens:,}-token prefill and "
        f"{req.max_num_seqs} sequences' logits), non-torch {split.non_torch / gib:.2f}"
        + (f", CUDA graphs {split.graphs_in_budget / gib:.2f}" if split.graphs_in_budget else "")
        + f" → KV cache {max(split.kv_cache, 0) / gib:.2f} GiB.",
        _kv_reason(config, req.kv_cache_dtype, per_token, tp),
        f"KV capacity: {capacity:,} tokens (whole blocks of {BLOCK_SIZE}); at {typical:,} tokens per sequence "
        f"that is {concurrency:.1f} concurrent sequences"
        + (f" (max_num_seqs {req.max_num_seqs} caps it)." if concurrency >= req.max_num_seqs else "."),
    ]
    if split.used_by_others:
        reasons.append(f"Other processes already use {split.used_by_others / gib:.1f} GiB of a GPU; it counts as used.")
    if split.headroom < split.cuda_graphs:
        reasons.append(
            f"Only {split.headroom / gib:.2f} GiB stays outside vLLM's share for CUDA graphs (about "
            f"{split.cuda_graphs / gib:.1f} GiB): lower gpu_memory_utilization or add --enforce-eager."
        )
    elif split.kv_cache <= 0:
        reasons.append(
            f"Does not fit: weights, activation peak and non-torch memory take more than the "
            f"{split.total * util / gib:.1f} GiB vLLM may use per GPU, so nothing is left for the KV cache."
        )
    elif capacity < model_len:
        reasons.append(
            f"Does not fit: one {model_len:,}-token sequence needs more KV cache than the {capacity:,} tokens left."
        )
    return GpuPlan(
        fits=fits,
        tensor_parallel_size=tp,
        gpu_indices=[g.index for g in gpus],
        gpu_memory_utilization=util,
        max_model_len=model_len,
        max_num_seqs=req.max_num_seqs,
        kv_cache_dtype=req.kv_cache_dtype,
        weights_bytes=weights,
        kv_bytes_per_token=per_token,
        kv_capacity_tokens=capacity,
        typical_context=typical,
        concurrency_at_typical_context=round(concurrency, 2),
        split=split,
        reasons=reasons,
    )


def _tp_reason(config: ModelConfig, tp: int, gpus: int) -> str:
    why = f"Tensor parallel {tp} on {gpus} GPU{'s' if gpus > 1 else ''}: divides the {config.num_attention_heads} "
    why += "attention heads"
    if not config.is_mla and config.num_key_value_heads < tp:
        why += f"; its {config.num_key_value_heads} KV heads are replicated so each GPU holds one"
    return why + "."


def _kv_reason(config: ModelConfig, kv_dtype: str, per_token: int, tp: int) -> str:
    dtype = "fp8" if kv_dtype == "fp8" else config.torch_dtype
    mix = config.layers
    if config.is_mla:
        text = (
            f"KV cache per token (MLA): {mix.attention} layers × (kv_lora_rank {config.kv_lora_rank} + "
            f"qk_rope_head_dim {config.qk_rope_head_dim}) × {dtype} = {per_token:,} bytes, whole on every GPU."
        )
    else:
        text = (
            f"KV cache per token: 2 × {mix.attention} attention layers × {config.num_key_value_heads} KV heads × "
            f"head_dim {config.head_dim} × {dtype} = {per_token:,} bytes"
            + (f", split over {tp} GPUs." if tp > 1 else ".")
        )
    if mix.sliding:
        text += f" {mix.sliding} layers use a {mix.window:,}-token sliding window, so long sequences hold less."
    if mix.state:
        text += f" {mix.state} Mamba/linear-attention layers keep a fixed state per sequence instead."
    return text


def _refusal(config: ModelConfig, weights: int, req: PlanRequest, why: str) -> GpuPlan:
    return GpuPlan(
        fits=False,
        tensor_parallel_size=0,
        gpu_indices=[],
        gpu_memory_utilization=0.0,
        max_model_len=req.max_model_len or config.max_position_embeddings,
        max_num_seqs=req.max_num_seqs,
        kv_cache_dtype=req.kv_cache_dtype,
        weights_bytes=weights,
        kv_bytes_per_token=kv_bytes_per_token(config),
        kv_capacity_tokens=0,
        typical_context=0,
        concurrency_at_typical_context=0.0,
        split=None,
        reasons=[why],
    )


def _remedies(config: ModelConfig, weights: int, inventory: Inventory, req: PlanRequest, best: GpuPlan) -> list[str]:
    """What would make it fit, each with its numbers, at the context asked for: a shorter context, an FP8
    KV cache, a quantized checkpoint, more GPUs. Only alternatives that do fit are offered."""
    out = []
    if best.kv_capacity_tokens >= 1024:
        out.append(f"Lower max_model_len to {best.kv_capacity_tokens // 1024 * 1024:,} tokens or less.")
    wanted = replace(req, max_model_len=best.max_model_len)  # alternatives must hold this context, not a shorter one
    gpus = inventory.devices
    if req.kv_cache_dtype != "fp8" and all(g.supports_fp8_kv for g in gpus):
        fp8 = plan_gpu(config, weights, inventory, replace(wanted, kv_cache_dtype="fp8"), with_remedies=False)
        out += _offer("Use an FP8 KV cache (kv_cache_dtype fp8)", fp8)
    if not config.quantization:
        for label, ratio in (("an FP8 checkpoint", 0.5), ("a 4-bit (AWQ/GPTQ) checkpoint", 0.28)):
            quant = plan_gpu(config, int(weights * ratio), inventory, wanted, with_remedies=False)
            if offer := _offer(f"Use {label} (about {weights * ratio / GIB:.0f} GiB of weights)", quant):
                out += offer
                break
    base = gpus[0]
    for count in (n for n in (2, 4, 8, 16) if n > len(gpus)):
        bigger = Inventory(inventory.source, [replace(base, index=i, memory_used_bytes=0) for i in range(count)])
        more = plan_gpu(config, weights, bigger, replace(wanted, tensor_parallel_size=0), with_remedies=False)
        if more.fits:
            out.append(
                f"More GPUs: {count} × {base.name} at tensor parallel {more.tensor_parallel_size} would hold "
                f"{more.kv_capacity_tokens:,} tokens of KV cache."
            )
            break
    return out


def _offer(label: str, plan: GpuPlan) -> list[str]:
    """An alternative in words: as asked when it fits, with a shorter context when only that fits, else none."""
    if plan.fits:
        return [
            f"{label}: {plan.kv_capacity_tokens:,} tokens of KV cache at tensor parallel {plan.tensor_parallel_size}."
        ]
    if plan.kv_capacity_tokens >= 1024:
        shorter = plan.kv_capacity_tokens // 1024 * 1024
        return [f"{label}, with max_model_len {shorter:,} or less: {plan.kv_capacity_tokens:,} tokens of KV cache."]
    return []
