"""SGLang's flag rules, for every way Hearth starts it: the CPU engine (engines.sglang, a local process) and the GPU
image (engines.adapters). Each path asks for its flags here and nowhere else, so a user's flag is read the same
way on both: by SGLang's own argument parser (engines.argspec), so ``--context-len 2048``, ``--context-length=2048``,
``--tp 2`` and ``--tensor-parallel-size 2`` (its alias of ``--tp-size``) are the flags SGLang would take them for,
and Hearth never adds a second one. Unknown flags pass as they are.

Parsers: the dump of the installed SGLang CPU (0.5.15.post1, engines/argspecs) reads the CPU engine's flags and
those of every GPU image: for a release with no dump, the nearest dump stands in (engines.argspec.load: the
newest not newer, else the oldest). So a user's flag on another release is read with 0.5.15.post1's options: an
abbreviation its newer flags make ambiguous is refused, and an alias it has that an older release lacks (``--model``
for ``--model-path``, from 0.5) is read as the flag, where that release refuses the command either way.

Version gates: the releases whose parser accepts a flag, read in SGLang's released code
(python/sglang/srt/server_args.py and its HTTP server in the wheels 0.3.5, 0.3.5.post1, 0.3.5.post2, 0.3.6, 0.4.0,
0.4.1.post5 to post7, 0.4.2, 0.5.5, 0.5.6 and 0.5.23; the parser flags in 0.4.0 to 0.4.4 and 0.5.5). Below the
floor nothing is built.

====================================  ==========================  ===========================================
flag                                  accepted in                 what the wheels show
====================================  ==========================  ===========================================
SGLang (floor)                        0.4.0 on                    0.4.0 answers GET /get_server_info with its
                                                                  version; 0.3.6 has only /get_server_args
``--enable-metrics``                  0.3.5.post1 on              not in 0.3.5 (added by sglang#1853)
``--revision``                        0.4.0 on                    not in 0.3.6
``--kv-cache-dtype fp8_e5m2``         0.3.5 on (earliest read)    added by sglang#1204, Aug 2024
``--kv-cache-dtype fp8_e4m3``         0.4.1.post6 on              choices [auto, fp8_e5m2] in 0.4.1.post5
                                                                  (sglang#2786)
``--tool-call-parser``                0.4.2 on                    not in 0.4.1 (sglang/srt/server_args.py)
``--reasoning-parser``                0.4.4 on                    not in 0.4.3
====================================  ==========================  ===========================================

Every flag in SGLANG_FLAGS was read in the parser (SGLang 0.5.23:
sglang/srt/arg_groups/fields/{model,schedule,serving,parallel,observability}.py), and whole commands from these
rules were parsed by SGLang 0.4.0, 0.4.1.post6, 0.4.2, 0.5.5, 0.5.6 and 0.5.23 (ServerArgs.add_cli_args) and by
the installed 0.5.15.post1 (tests/test_engine_parsers.py). SGLang takes tools whenever a parser is set (no switch
beside ``--tool-call-parser``).

The CPU engine, each measured on 2026-12-01 (scripts/sglang-cpu.md):
- ``--device cpu`` selects its device (with env ``SGLANG_USE_CPU_ENGINE=1``, engines.sglang).
- ``--max-total-tokens`` pins the KV pool to the plan's capacity: SGLang then reports exactly it as
  ``max_total_num_tokens``. ``--mem-fraction-static`` alone sizes the pool from the host's free memory at
  start (0.05 gave 29,591 and 35,746 tokens in two starts), so it only bounds the pool here: SGLang keeps
  the smaller of the two (model_runner_kv_cache_mixin.py ``_apply_token_constraints``).
- ``--disable-overlap-schedule``: 8 streams ran 2.2x faster on 2 cores (SGLang's CPU docs use it too).
- ``--sleep-on-idle``: an idle scheduler otherwise spins one core at 100%.
- ``--grammar-backend llguidance``: xgrammar's mask has no CPU path in 0.5.15.post1 (xgrammar_backend.py
  ``apply_vocab_mask`` raises "Unsupported device: cpu"), which kills the engine on the first
  ``tool_choice: required`` or ``response_format`` request; llguidance's works.
"""

from collections.abc import Sequence

from engines.argspec import Reading, load
from engines.flag_gates import Gate, Span, Wanted, check_floor, checked_plan, gated, kv_dtype, refuse_owned
from engines.planner import GpuPlan
from engines.sizing import SizingPlan

SGLANG_MIN_VERSION = "0.4.0"
SGLANG_CPU_VERSION = "0.5.15.post1"  # what scripts/setup-sglang-cpu.sh installs

# Gate → the versions that accept it; sources in the module docstring. A gate not listed: every version.
SGLANG_GATES: dict[Gate, tuple[Span, ...]] = {
    ("--tool-call-parser", None): (("0.4.2", None),),
    ("--reasoning-parser", None): (("0.4.4", None),),
    ("--enable-metrics", None): (("0.3.5.post1", None),),
    ("--revision", None): (("0.4.0", None),),
    ("--kv-cache-dtype", "fp8_e5m2"): (("0.3.5", None),),
    ("--kv-cache-dtype", "fp8_e4m3"): (("0.4.1.post6", None),),
}

# Flags Hearth must own: the gateway reaches the engine by them. A user value is refused, not dropped.
SGLANG_OWNED = ("--model-path", "--served-model-name", "--host", "--port", "--api-key")

# Every flag the GPU image's command carries, as read in the parsers named in the module docstring.
SGLANG_FLAGS = frozenset(
    {
        "--model-path",
        "--served-model-name",
        "--host",
        "--port",
        "--api-key",
        "--revision",
        "--tp-size",
        "--mem-fraction-static",
        "--context-length",
        "--max-running-requests",
        "--kv-cache-dtype",
        "--enable-metrics",
        "--tool-call-parser",
        "--reasoning-parser",
    }
)

# KV cache dtype in the plan → SGLang's value: it has no plain "fp8" (its choices start auto, fp8_e5m2, fp8_e4m3).
SGLANG_KV_DTYPES = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
# On the CPU, an upper bound for the KV pool only (--max-total-tokens sets it): SGLang's profile keeps this share
# of the memory free before loading for weights and KV, the rest for activations.
MEM_FRACTION_STATIC = "0.9"


def user_flags(user_args: Sequence[str], version: str | None = None) -> Reading:
    """``user_args`` as SGLang ``version``'s parser reads them (the nearest dump; the newest with None). Raises
    ValueError (engines.argspec's FlagError among them) where that parser would refuse them, or for an
    unparseable version."""
    return load("sglang", version).read(user_args)


def parser_flags(tool_call_parser: str | None, reasoning_parser: str | None) -> list[Wanted]:
    """The model's parsers (engines.parsers, SGLang's names), optional: ``--tool-call-parser NAME``,
    ``--reasoning-parser NAME``."""
    wanted: list[Wanted] = []
    if tool_call_parser:
        wanted.append(("--tool-call-parser", tool_call_parser, False))
    if reasoning_parser:
        wanted.append(("--reasoning-parser", reasoning_parser, False))
    return wanted


def gpu_flags(
    *,
    version: str,
    revision: str | None,
    plan: GpuPlan,
    user_args: Sequence[str] = (),
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> list[str]:
    """The optional flags Hearth adds to SGLang ``version``'s GPU command for ``plan``, with their values, in
    order: ``--revision`` when given, ``--tp-size``, ``--mem-fraction-static`` (the plan's
    gpu_memory_utilization, 0–1), ``--context-length`` (tokens), ``--max-running-requests``, the KV dtype as
    fp8_e4m3 / fp8_e5m2 unless "auto", ``--enable-metrics`` (its /metrics is off without it; left out where the
    version lacks it) and the model's parsers when given. None overrides a flag in ``user_args``. Raises
    ValueError for an unparseable or too old version, user flags SGLang's parser refuses, a user flag Hearth owns
    (model path, name, host, port, key), a plan that does not fit, or a KV dtype this version does not take.
    """
    check_floor("SGLang", version, SGLANG_MIN_VERSION)
    user = user_flags(user_args, version)
    refuse_owned(user, SGLANG_OWNED)
    plan = checked_plan(plan)
    wanted: list[Wanted] = [("--revision", revision, True)] if revision else []
    wanted += [
        ("--tp-size", str(plan.tensor_parallel_size), True),
        ("--mem-fraction-static", f"{plan.gpu_memory_utilization:.2f}", True),
        ("--context-length", str(plan.max_model_len), True),
        ("--max-running-requests", str(plan.max_num_seqs), True),
    ]
    if kv := kv_dtype(plan, SGLANG_KV_DTYPES, "SGLang"):
        wanted.append(("--kv-cache-dtype", kv, True))
    wanted.append(("--enable-metrics", None, False))
    wanted += parser_flags(tool_call_parser, reasoning_parser)
    return gated("SGLang", version, wanted, SGLANG_GATES, user)


def cpu_flags(
    *,
    plan: SizingPlan,
    user_args: Sequence[str] = (),
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> list[str]:
    """The flags Hearth adds to the SGLang CPU engine's command (SGLANG_CPU_VERSION) for ``plan`` (a plan_cpu
    plan), in order: ``--device cpu``, ``--context-length`` (tokens), ``--max-total-tokens`` (the plan's KV
    capacity, tokens), ``--mem-fraction-static`` (MEM_FRACTION_STATIC), ``--enable-metrics``, ``--sleep-on-idle``,
    ``--disable-overlap-schedule``, ``--grammar-backend llguidance`` and the model's parsers when given. None
    overrides a flag in ``user_args``. Raises ValueError for user flags SGLang's parser refuses or one Hearth
    owns."""
    user = user_flags(user_args, SGLANG_CPU_VERSION)
    refuse_owned(user, SGLANG_OWNED)
    wanted: list[Wanted] = [
        ("--device", "cpu", True),
        ("--context-length", str(plan.max_model_len), True),
        ("--max-total-tokens", str(plan.kv_capacity_tokens), True),
        ("--mem-fraction-static", MEM_FRACTION_STATIC, True),
        ("--enable-metrics", None, True),
        ("--sleep-on-idle", None, True),
        ("--disable-overlap-schedule", None, True),
        ("--grammar-backend", "llguidance", True),
        *parser_flags(tool_call_parser, reasoning_parser),
    ]
    return gated("SGLang", SGLANG_CPU_VERSION, wanted, SGLANG_GATES, user)
