"""Extra engine flags an admin may add to a deployment, and the ones Hearth refuses: flags it sets itself,
flags the plan decides, and flags that would take GPU memory or GPUs behind the plan's back."""

from console.errors import ConsoleError
from engines.vllm import user_flag_names

MAX_EXTRA_ARGS, MAX_EXTRA_ARGS_CHARS = 100, 2000  # the console's field takes 2,000 characters too
PLANNED_FLAGS = frozenset(
    {"--max-model-len", "--gpu-memory-utilization", "--tensor-parallel-size", "--kv-cache-dtype", "--max-num-seqs"}
)  # flags whose values come from the plan; an override in extra_args would bypass its checks
HEARTH_FLAGS = frozenset({"--model", "--served-model-name", "--host", "--port", "--api-key", "--uds"})  # Hearth's
# Flags that change how much GPU memory or how many GPUs an engine takes, behind the plan's back.
RESOURCE_FLAGS = frozenset({"--pipeline-parallel-size", "--data-parallel-size", "--data-parallel-size-local",
                            "--num-gpu-blocks-override",
                            "--kv-cache-memory-bytes", "--block-size", "--cpu-offload-gb", "--config"})  # fmt: skip

def _matching(flags: set[str], protected: frozenset[str]) -> list[str]:
    """The protected flags that ``flags`` name, abbreviations included (vLLM's argparse accepts any
    unambiguous prefix: ``--max-model`` is ``--max-model-len``)."""
    return sorted({p for p in protected for f in flags if f.startswith("--") and len(f) > 3 and p.startswith(f)})


def check_extra_args(extra_args: list[str]) -> None:
    """Refuse extra engine flags that Hearth sets itself, that take GPUs behind the plan's back, or that
    the plan decides. Raises ConsoleError naming them."""
    if len(extra_args) > MAX_EXTRA_ARGS or sum(map(len, extra_args)) > MAX_EXTRA_ARGS_CHARS:
        raise ConsoleError(f"At most {MAX_EXTRA_ARGS} extra engine flags, {MAX_EXTRA_ARGS_CHARS:,} characters in all.")
    if not all(arg.isprintable() for arg in extra_args):
        raise ConsoleError("Extra engine flags must be printable text (no control characters).")
    flags = user_flag_names(extra_args)
    if owned := _matching(flags, HEARTH_FLAGS):
        raise ConsoleError(f"{', '.join(owned)}: Hearth sets these itself (the gateway relies on them).")
    if resources := _matching(flags, RESOURCE_FLAGS):
        raise ConsoleError(f"{', '.join(resources)}: these change what the engine takes of the GPUs behind the plan's "
                           "back; Hearth does not pass them.")  # fmt: skip
    if planned := _matching(flags, PLANNED_FLAGS):
        raise ConsoleError(
            f"{', '.join(planned)}: set {'it' if len(planned) == 1 else 'them'} in the deployment's fields, so the "
            "plan can check the value fits, not among the extra engine flags."
        )
