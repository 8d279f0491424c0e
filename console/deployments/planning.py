"""The sizing plan for a model on an engine here: which engines this appliance can launch, the GPU
inventory less what running deployments hold (console.deployments.gpu_holds), and the plan stored on a deployment
(engines.stored_plan).

Errors a user can fix raise ConsoleError with a message fit to show as it is.
"""

import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.conf import settings

from appliance.hardware import InventoryError, current_inventory
from console.catalog.models import ModelSource
from console.deployments import gpu_holds
from console.deployments.agent_support import agent_facts, parser_facts, takes_tools
from console.errors import ConsoleError
from console.names import INT_MAX
from engines.engine_version import parse_version
from engines.gpus import Inventory
from engines.launch import CPU_ENGINES, EngineKind, image_version
from engines.modelconfig import parse_config
from engines.planner import DEFAULT_MAX_NUM_SEQS, PlanRequest, plan_gpu
from engines.room import gib, gpus_words
from engines.sizing import plan_cpu
from engines.stored_plan import StoredPlan

MAX_KV_SPACE_GIB = 65_536
MAX_NUM_SEQS = 65_536
MAX_REPLICAS = 8
# The shortest context planned: a chat template's own tokens are ~10-30, so a shorter one holds no conversation
# (a trial planned max_model_len 1 and was told "Fits").
MIN_MODEL_LEN = 64
KV_CACHE_DTYPES = ("auto", "fp8")  # as the deployment form offers them (engines.sizing.kv_value_bytes)


def available_engines() -> list[EngineKind]:
    """The engines this appliance can launch: local processes run vLLM (CPU), the simulator, and SGLang (CPU)
    where its venv is built; the Docker runtime adds vLLM and SGLang containers where real GPUs are (not on a
    simulated inventory)."""
    engines = [EngineKind.VLLM_CPU, EngineKind.SIMULATOR]
    if settings.HEARTH_RUNTIME == "process" and Path(settings.HEARTH_SGLANG_CPU_PYTHON).exists():
        engines.insert(1, EngineKind.SGLANG_CPU)  # a local process only (scripts/setup-sglang-cpu.sh)
    if settings.HEARTH_RUNTIME == "docker" and not settings.HEARTH_GPU_INVENTORY.startswith("sim:"):
        engines += [EngineKind.VLLM, EngineKind.SGLANG]
    return engines


def demo_refusal(model: ModelSource) -> str:
    """Why a demo catalog model runs only on the simulator, and how to serve it for real."""
    return (
        f"{model.name} is from the demo catalog: Hearth has its configuration and size, not its weights, so only "
        f"the Simulator can run it. To serve it on a real engine, add {model.repo_id} from Hugging Face."
    )


def _vllm_release(engine: str) -> tuple[int, int] | None:
    """(major, minor) of the vLLM image a vLLM deployment will run, so the plan follows that release's
    memory accounting; None for other engines (the planner's general estimate)."""
    if engine != EngineKind.VLLM:
        return None
    release = parse_version(image_version(settings.HEARTH_ENGINE_IMAGES[engine]).lstrip("v"))
    return release[0], release[1]


def plan_for(
    model: ModelSource,
    engine: str,
    *,
    tool_call_parser: str = "",
    reasoning_parser: str = "",
    fit_max_tokens: bool = True,
    max_tokens_cap: int | None = None,
    **sizing: Any,
) -> StoredPlan:
    """The plan for ``model`` on ``engine``, as stored on a deployment: the sizing (``sizing``: sizing_plan's
    keywords) and what coding agents need of it, its ``parsers`` (the engine's tool-call and reasoning parsers,
    ``tool_call_parser``/``reasoning_parser`` overriding the choice: "" keeps it, "none" turns it off) and its
    ``agents`` (whether its context serves each agent's first request, with ``fit_max_tokens`` on or off and the
    deployment's ``max_tokens_cap``;
    console.deployments.agent_support).

    Raises ConsoleError as sizing_plan does, and for a parser name that is not one.
    """
    plan = sizing_plan(model, engine, **sizing)
    parsers = parser_facts(model, engine, tool_call_parser, reasoning_parser)
    tools = takes_tools(engine, parsers)
    agents = agent_facts(plan.max_model_len, fit_max_tokens, tools, model.chat_template, max_tokens_cap)
    return replace(plan, parsers=parsers, agents=agents)


def sizing_plan(
    model: ModelSource,
    engine: str,
    *,
    max_model_len: int = 0,
    kv_space_gib: float = 1.0,
    kv_cache_dtype: str = "auto",
    gpu_memory_utilization: float = 0.0,
    tensor_parallel_size: int = 0,
    replica_count: int = 1,
    max_num_seqs: int = 0,
    exclude: int | None = None,
    aside: Mapping[int, str] | None = None,
) -> StoredPlan:
    """The sizing plan for ``model`` on ``engine``, without parsers and agents (plan_for adds them).

    vLLM (CPU) is planned from its KV space (GiB); GPU engines from the GPU inventory in force, less the
    GPUs other awake deployments hold (``exclude``: a deployment whose own GPUs count as free; ``aside``: plan as
    if these deployments were put aside, id → "sleep" or "stop"), what asleep ones still hold counted as used.
    Raises ConsoleError for an unknown engine, bad numbers (a CPU engine given a tensor parallel size over 1
    or a gpu_memory_utilization among them), or an inventory that cannot be read.
    """
    if engine not in available_engines():
        offered = ", ".join(available_engines())
        raise ConsoleError(f"Engine '{engine}' is not available here; choose one of: {offered}.")
    if not (max_model_len == 0 or MIN_MODEL_LEN <= max_model_len <= INT_MAX):
        raise ConsoleError(
            f"max_model_len must be 0 (the model's own) or {MIN_MODEL_LEN} to {INT_MAX:,} tokens, "
            f"not {max_model_len:,}"
            + (": a shorter context holds no prompt." if max_model_len < MIN_MODEL_LEN else ".")
        )
    if not 0 <= tensor_parallel_size <= 64:
        raise ConsoleError(f"Tensor parallel size must be 0 (auto) to 64 GPUs, not {tensor_parallel_size:,}.")
    if not 0 <= gpu_memory_utilization < 1:
        utilization = f"{gpu_memory_utilization:g}"
        raise ConsoleError(f"gpu_memory_utilization must be 0 (auto) or a ratio below 1, not {utilization}.")
    if not 0 < kv_space_gib <= MAX_KV_SPACE_GIB:  # vLLM (CPU)'s only, but never stored out of range
        raise ConsoleError(f"KV space must be above 0 and at most {MAX_KV_SPACE_GIB:,} GiB.")
    if not 1 <= replica_count <= MAX_REPLICAS:
        raise ConsoleError(f"A deployment runs 1 to {MAX_REPLICAS} replicas.")
    if kv_cache_dtype not in KV_CACHE_DTYPES:  # the CPU plan ignores it, but it is stored and shown
        raise ConsoleError(f"KV cache dtype must be one of: {', '.join(KV_CACHE_DTYPES)}.")
    if not 0 <= max_num_seqs <= MAX_NUM_SEQS:
        raise ConsoleError(f"max_num_seqs must be 0 (the planner's default) to {MAX_NUM_SEQS:,} sequences.")
    if engine in CPU_ENGINES and (tensor_parallel_size > 1 or gpu_memory_utilization):
        raise ConsoleError(
            f"{engine} runs on the CPU, in one process: tensor parallel size and gpu_memory_utilization are for "
            "GPU engines; leave them 0 (its KV space sizes it)."
        )
    config = parse_config(model.config)
    if engine in CPU_ENGINES:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // max(replica_count, 1)
        cpu_plan = plan_cpu(config, model.weights_bytes, kv_space_gib, max_model_len, memory, engine=engine)
        budget = "vLLM's --kv-cache-memory-bytes" if engine == EngineKind.VLLM_CPU else "SGLang's --max-total-tokens"
        return StoredPlan(cpu_plan, inventory=f"CPU ({budget})")
    try:
        whole = current_inventory()
        inventory, held, asleep = free_gpus(whole, exclude, aside)
        request = PlanRequest(
            vllm_version=_vllm_release(engine),
            max_model_len=max_model_len,
            kv_cache_dtype=kv_cache_dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            max_num_seqs=max_num_seqs or DEFAULT_MAX_NUM_SEQS,
        )
        if held and not inventory.devices:
            if plan_gpu(config, model.weights_bytes, whole, request).fits:
                raise ConsoleError(f"Every GPU is held by a deployment serving or launching: {held}. Stop one first.")
            inventory, held = whole, ""  # it fits nowhere here: the plan says why, not "stop one" (a check's)
        gpu_plan = plan_gpu(config, model.weights_bytes, inventory, request)
    except (InventoryError, ValueError) as exc:
        raise ConsoleError(str(exc)) from None
    if asleep:  # first, so that a refusal's own reason stays the last one
        note = (
            f"Asleep deployments still hold memory on a GPU, counted as used, and their GPUs are taken last: {asleep}."
        )
        gpu_plan = replace(gpu_plan, reasons=[note, *gpu_plan.reasons])
    if held:
        gpu_plan = replace(
            gpu_plan, reasons=[f"GPUs held by running deployments are left out: {held}.", *gpu_plan.reasons]
        )
    free = [d.index for d in inventory.devices]
    needed = gpu_plan.tensor_parallel_size * replica_count
    if gpu_plan.fits and needed > len(free):
        too_few = (
            f"{replica_count} replicas at tensor parallel {gpu_plan.tensor_parallel_size} need {needed} GPUs; "
            f"{len(free)} are free on this box."
        )
        gpu_plan = replace(gpu_plan, fits=False, reasons=[*gpu_plan.reasons, too_few])
    indices = sorted(free[:needed])
    names = {d.name for d in inventory.devices if d.index in indices}
    return StoredPlan(
        gpu_plan,
        inventory=inventory.describe(),
        gpu_indices=tuple(indices),
        gpu_count=len(inventory.devices),
        inventory_origin=inventory.provenance(time.time()),
        gpu_name=" / ".join(sorted(names)) + (" (simulated)" if inventory.simulated and names else ""),
    )


def free_gpus(
    inventory: Inventory, exclude: int | None = None, aside: Mapping[int, str] | None = None
) -> tuple[Inventory, str, str]:
    """The inventory less the GPUs awake deployments (but ``exclude``) hold, as if ``aside`` were put aside
    (console.deployments.gpu_holds); on the rest, what asleep deployments still hold and what other processes use
    counts as used, and those GPUs come after the empty ones: a plan takes its GPUs in the inventory's order, and an
    engine put on an asleep one's GPU while another stood empty kept it from waking (a trial waited 96 s). Also which
    GPUs are held and what the asleep ones hold, in words ("" when none)."""
    now, then = gpu_holds.holds(exclude), gpu_holds.holds(exclude, aside)
    held = {i: h.dep.name for h in then if not h.asleep for i in h.gpus}
    others, residue = gpu_holds.others_use(inventory, now), gpu_holds.residues(then)
    devices = [
        replace(d, memory_used_bytes=others[d.index] + residue.get(d.index, 0))
        for d in sorted(inventory.devices, key=lambda d: (residue.get(d.index, 0) > 0, d.index))
        if d.index not in held
    ]
    words = ", ".join(f"GPU {i} ({name})" for i, name in sorted(held.items()))
    asleep = [f"{h.dep.name} {gib(h.bytes_per_gpu)} on {gpus_words(h.gpus)}" for h in then if h.asleep and h.gpus]
    return replace(inventory, devices=devices), words, ", ".join(asleep)


def gpus_in_words(plan: StoredPlan) -> str:
    """The GPUs a plan holds, e.g. "GPU 1, an NVIDIA H100 80GB HBM3 (simulated)" or "GPUs 0, 1, 2, 3:
    4× NVIDIA H100 80GB HBM3"; a plan stored before ``gpu_name`` names the box it was planned on instead."""
    indices = [str(i) for i in plan.gpu_indices]
    which = f"GPU {indices[0]}" if len(indices) == 1 else f"GPUs {', '.join(indices)}"
    if not plan.gpu_name:
        return f"{which} of {plan.inventory or 'this box'}"
    return f"{which}, an {plan.gpu_name}" if len(indices) == 1 else f"{which}: {len(indices)}× {plan.gpu_name}"
