"""Flag builder for SGLang's server on the CPU (PyPI's sglang 0.5.15.post1 in its own venv,
scripts/setup-sglang-cpu.sh), run as a local process.

What worked here, each measured on 2026-12-01 (scripts/sglang-cpu.md):
- env ``SGLANG_USE_CPU_ENGINE=1`` selects SGLang's CPU platform (sglang/srt/platforms/__init__.py) and
  ``--device cpu`` its device; without the env the model's rotary embedding asks for ``vllm._custom_ops``.
- ``--max-total-tokens`` pins the KV pool to the plan's capacity: SGLang then reports exactly it as
  ``max_total_num_tokens``. ``--mem-fraction-static`` alone sizes the pool from the host's free memory at
  start (0.05 gave 29,591 and 35,746 tokens in two starts), so it only bounds the pool here: SGLang keeps
  the smaller of the two (model_runner_kv_cache_mixin.py ``_apply_token_constraints``).
- ``--disable-overlap-schedule``: 8 streams ran 2.2x faster on 2 cores (SGLang's CPU docs use it too).
- ``--sleep-on-idle``: an idle scheduler otherwise spins one core at 100%.
- ``--grammar-backend llguidance``: xgrammar's mask has no CPU path in 0.5.15.post1 (xgrammar_backend.py
  ``apply_vocab_mask`` raises "Unsupported device: cpu"), which kills the engine on the first
  ``tool_choice: required`` or ``response_format`` request; llguidance's works.
- ``SGLANG_GRPC_PORT``: SGLang checks a gRPC port of ``--port`` + 10000 even with gRPC off and refuses
  to start above port 55535 ("SGLANG_GRPC_PORT (66031) must be between 1 and 65535", server_args.py
  ``_handle_deprecated_args``); Hearth names one below the port there.
The API key goes in the environment, and engines.sglang_launcher hands it to SGLang as ``--api-key`` (the
only way SGLang takes one) without it reaching the process's argv or SGLang's log; ``GET /server_info``
echoes it to a caller that has it.
"""

from collections.abc import Sequence
from pathlib import Path

from engines.adapters import SGLANG_ALIASES, SGLANG_OWNED, set_by_user, user_flag_names
from engines.launch import EngineKind, LaunchSpec
from engines.sglang_launcher import API_KEY_ENV
from engines.sizing import SizingPlan

GRPC_PORT_OFFSET = 10_000  # SGLang's default gRPC port is --port + this (server_args.py)
# An upper bound for the KV pool only (--max-total-tokens sets it): SGLang's profile keeps this share of
# the memory free before loading for weights and KV, the rest for activations.
MEM_FRACTION_STATIC = "0.9"


def cpu_flags(plan: SizingPlan) -> list[tuple[str, str | None]]:
    """SGLang's flags for a CPU plan, ``(flag, value)``, value None for a switch, in the order emitted."""
    return [
        ("--device", "cpu"),
        ("--context-length", str(plan.max_model_len)),
        ("--max-total-tokens", str(plan.kv_capacity_tokens)),
        ("--mem-fraction-static", MEM_FRACTION_STATIC),
        ("--enable-metrics", None),
        ("--sleep-on-idle", None),
        ("--disable-overlap-schedule", None),
        ("--grammar-backend", "llguidance"),
    ]


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
    """A LaunchSpec for SGLang CPU: flags from ``plan`` (a plan_cpu plan for EngineKind.SGLANG_CPU),
    never overriding one the user set (aliases and abbreviations as SGLang's argparse reads them).

    ``program`` runs the server (``launcher_program(python)``, engines.sglang_launcher); ``model`` the model folder;
    ``cache_dir`` holds the caches the engine writes; ``tool_call_parser`` and ``reasoning_parser`` are
    SGLang's names for the model's (engines.parsers; SGLang needs no switch beside ``--tool-call-parser``).
    Raises ValueError for an empty API key or a user flag Hearth owns (model path, served name, host, port,
    key).
    """
    names = user_flag_names(user_args, SGLANG_ALIASES)
    if taken := [flag for flag in SGLANG_OWNED if set_by_user(flag, names)]:
        raise ValueError(f"{', '.join(taken)}: Hearth sets these itself (the gateway relies on them).")
    if not api_key:
        raise ValueError("An SGLang engine needs a per-launch API key; an empty one would leave it open.")
    added: list[str] = []
    parsers = [("--tool-call-parser", tool_call_parser), ("--reasoning-parser", reasoning_parser)]
    for flag, value in [*cpu_flags(plan), *((f, v) for f, v in parsers if v)]:
        if not set_by_user(flag, names):
            added += [flag] if value is None else [flag, value]
    args = [
        "--model-path", model,
        "--served-model-name", served_model_name,
        "--host", host,
        "--port", str(port),
        *added,
        *user_args,
    ]  # fmt: skip
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
        engine=EngineKind.SGLANG_CPU, program=program, args=args, env=env, host=host, port=port,
        api_key=api_key, served_model_name=served_model_name, added_flags=added,
    )  # fmt: skip
