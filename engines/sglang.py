"""Launch spec for SGLang's server on the CPU (PyPI's sglang 0.5.15.post1 in its own venv,
scripts/setup-sglang-cpu.sh), run as a local process. Its flags come from engines.sglang_flags, SGLang's one flag
builder (the GPU image's too), where what each was measured to do here is written.

The environment, each measured on 2026-12-01 (scripts/sglang-cpu.md):
- ``SGLANG_USE_CPU_ENGINE=1`` selects SGLang's CPU platform (sglang/srt/platforms/__init__.py) beside
  ``--device cpu``; without it the model's rotary embedding asks for ``vllm._custom_ops``.
- ``SGLANG_GRPC_PORT``: SGLang checks a gRPC port of ``--port`` + 10000 even with gRPC off and refuses
  to start above port 55535 ("SGLANG_GRPC_PORT (66031) must be between 1 and 65535", server_args.py
  ``_handle_deprecated_args``); Hearth names one below the port there.
The API key goes in the environment, and engines.sglang_launcher hands it to SGLang as ``--api-key`` (the
only way SGLang takes one) without it reaching the process's argv or SGLang's log; ``GET /server_info``
echoes it to a caller that has it.
"""

from collections.abc import Sequence
from pathlib import Path

from engines import sglang_flags
from engines.launch import EngineKind, LaunchSpec
from engines.sglang_launcher import API_KEY_ENV
from engines.sizing import SizingPlan

GRPC_PORT_OFFSET = 10_000  # SGLang's default gRPC port is --port + this (server_args.py)


def grpc_port(port: int) -> int:
    """The (unused) gRPC port SGLang must be given for HTTP ``port``: its default, port + 10000, while that
    is a TCP port, else port - 10000; never the HTTP port itself, which SGLang refuses too."""
    return port + GRPC_PORT_OFFSET if port + GRPC_PORT_OFFSET <= 65535 else port - GRPC_PORT_OFFSET


def build_sglang_cpu_spec(
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
    """A LaunchSpec for SGLang CPU: flags from ``plan`` (a plan_cpu plan for EngineKind.SGLANG_CPU) by
    sglang_flags.cpu_flags, never overriding one the user set (as SGLang's own parser reads them).

    ``program`` runs the server (``launcher_program(python)``, engines.sglang_launcher); ``model`` the model folder;
    ``cache_dir`` holds the caches the engine writes; ``tool_call_parser`` and ``reasoning_parser`` are
    SGLang's names for the model's (engines.parsers; SGLang needs no switch beside ``--tool-call-parser``).
    Raises ValueError for user flags SGLang's parser refuses, a user flag Hearth owns (model path, served name,
    host, port, key) or an empty API key.
    """
    added = sglang_flags.cpu_flags(
        plan=plan, user_args=user_args, tool_call_parser=tool_call_parser, reasoning_parser=reasoning_parser
    )
    if not api_key:
        raise ValueError("An SGLang engine needs a per-launch API key; an empty one would leave it open.")
    args = [
        "--model-path",
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
        API_KEY_ENV: api_key,  # the launcher's (engines.sglang_launcher): never in argv or SGLang's log
        "SGLANG_USE_CPU_ENGINE": "1",
        "SGLANG_GRPC_PORT": str(grpc_port(port)),
        "HF_HUB_OFFLINE": "1",
        "OUTLINES_CACHE_DIR": str(cache_dir / "sglang" / "outlines"),
        "TRITON_CACHE_DIR": str(cache_dir / "sglang" / "triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "sglang" / "torchinductor"),
    }
    return LaunchSpec(
        engine=EngineKind.SGLANG_CPU,
        program=program,
        args=args,
        env=env,
        host=host,
        port=port,
        api_key=api_key,
        served_model_name=served_model_name,
        added_flags=added,
    )
