"""Extra engine flags an admin may add to a deployment, and the ones Hearth refuses: flags it sets itself,
flags the plan decides, and flags that would take GPU memory or GPUs behind the plan's back.

The flags are read as the deployment's engine reads them, by its own argument parser (engines.vllm_flags,
engines.sglang_flags; the launch reads them the same way), so an alias or an unambiguous prefix is the flag it
stands for: ``--max-model 2048`` is vLLM's ``--max-model-len``, ``-pp 2`` its ``--pipeline-parallel-size``,
``--tp 2`` SGLang's ``--tp-size``. Flags the parser does not know pass as they are (the engine decides)."""

from console.errors import ConsoleError
from engines import sglang_flags, vllm_flags
from engines.argspec import Reading
from engines.launch import SGLANG_ENGINES, EngineKind

MAX_EXTRA_ARGS, MAX_EXTRA_ARGS_CHARS = 100, 2000  # the console's field takes 2,000 characters too
# Per engine family, by each flag's canonical name (engines.argspec.ArgSpec.canonical): Hearth's own flags (the
# gateway reaches the engine by them), flags whose values come from the plan (an override would bypass its
# checks), and flags that change how much GPU memory or how many GPUs the engine takes, behind the plan's back.
HEARTH_FLAGS = {"vllm": frozenset(vllm_flags.VLLM_OWNED), "sglang": frozenset(sglang_flags.SGLANG_OWNED)}
PLANNED_FLAGS = {
    "vllm": frozenset(
        {"--max-model-len", "--gpu-memory-utilization", "--tensor-parallel-size", "--kv-cache-dtype", "--max-num-seqs"}
    ),
    "sglang": frozenset(
        {
            "--context-length",
            "--mem-fraction-static",
            "--tp-size",
            "--kv-cache-dtype",
            "--max-running-requests",
            "--max-total-tokens",  # the KV pool the plan sized (on the CPU from the KV space)
        }
    ),
}
RESOURCE_FLAGS = {
    "vllm": frozenset(
        {
            "--pipeline-parallel-size",
            "--data-parallel-size",
            "--data-parallel-size-local",
            "--num-gpu-blocks-override",
            "--kv-cache-memory-bytes",
            "--block-size",
            "--cpu-offload-gb",
            "--config",
        }
    ),
    "sglang": frozenset(
        {
            "--pp-size",
            "--dp-size",
            "--nnodes",
            "--base-gpu-id",
            "--gpu-id-step",
            "--cpu-offload-gb",
            "--page-size",
            "--config",
        }
    ),
}


def family(engine: str) -> str:
    """The engine family whose flags ``engine`` (an EngineKind value) takes: "sglang" or "vllm" (the simulator
    takes vLLM's)."""
    return "sglang" if engine in SGLANG_ENGINES else "vllm"


def user_flags(extra_args: list[str], engine: str) -> Reading:
    """``extra_args`` as ``engine``'s parser reads them (its newest dump). Raises ValueError where it would
    refuse them."""
    if family(engine) == "sglang":
        return sglang_flags.user_flags(extra_args)
    return vllm_flags.user_flags(extra_args, simulator=engine == EngineKind.SIMULATOR)


def check_extra_args(extra_args: list[str], engine: str) -> None:
    """Refuse extra engine flags for ``engine`` (an EngineKind value) that its parser would refuse (an
    ambiguous prefix, a flag without its value, a value before any flag), that Hearth sets itself, that take GPUs
    behind the plan's back, or that the plan decides. Raises ConsoleError naming them."""
    if len(extra_args) > MAX_EXTRA_ARGS or sum(map(len, extra_args)) > MAX_EXTRA_ARGS_CHARS:
        raise ConsoleError(f"At most {MAX_EXTRA_ARGS} extra engine flags, {MAX_EXTRA_ARGS_CHARS:,} characters in all.")
    if not all(arg.isprintable() for arg in extra_args):
        raise ConsoleError("Extra engine flags must be printable text (no control characters).")
    if extra_args and not extra_args[0].startswith("-"):
        raise ConsoleError(
            f"Extra engine flags start with a flag (--name), not {extra_args[0]!r}: a value must follow its flag."
        )
    name = family(engine)
    try:
        flags = user_flags(extra_args, engine).flags()
    except ValueError as exc:
        raise ConsoleError(f"{'SGLang' if name == 'sglang' else 'vLLM'} would refuse these flags: {exc}.") from None
    if owned := sorted(flags & HEARTH_FLAGS[name]):
        raise ConsoleError(f"{', '.join(owned)}: Hearth sets these itself (the gateway relies on them).")
    if resources := sorted(flags & RESOURCE_FLAGS[name]):
        raise ConsoleError(
            f"{', '.join(resources)}: these change what the engine takes of the GPUs behind the plan's "
            "back; Hearth does not pass them."
        )
    if planned := sorted(flags & PLANNED_FLAGS[name]):
        raise ConsoleError(
            f"{', '.join(planned)}: set {'it' if len(planned) == 1 else 'them'} in the deployment's fields, so the "
            "plan can check the value fits, not among the extra engine flags."
        )


def schedules_by_priority(extra_args: list[str], engine: str) -> bool:
    """Whether ``engine`` (an EngineKind value) launched with ``extra_args`` orders its queue by each request's
    ``priority`` field, lower first, so that the gateway may pass a request's class in it (gateway.lanes'
    ENGINE_PRIORITY): vLLM's (and the simulator's) ``--scheduling-policy priority`` (read in vLLM 0.32.0's
    vllm/v1/core/sched/request_queue.py ``PriorityRequestQueue``), or SGLang's ``--enable-priority-scheduling``
    together with ``--schedule-low-priority-values-first`` (without it SGLang runs higher values first;
    sglang/srt/server_args.py, 0.5.15.post1). Hearth adds neither by default: an admin opts a deployment in among
    its extra engine flags. False for flags the engine's parser refuses."""
    try:
        reading = user_flags(extra_args, engine)
    except ValueError:
        return False
    if family(engine) == "sglang":
        return reading.sets("--enable-priority-scheduling") and reading.sets("--schedule-low-priority-values-first")
    dest = reading.spec.dest_of("--scheduling-policy")
    return [g.value for g in reading.given if g.dest == dest][-1:] == ["priority"]
