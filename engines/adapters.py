"""Engine adapters for the GPU engines that run as containers: vLLM and SGLang.

Pure: a plan and a few facts in, the container's command and environment out. Flags are gated by the
running engine's version and never override a flag the user set.

Entrypoints. ``vllm/vllm-openai``'s ENTRYPOINT was ``python3 -m vllm.entrypoints.openai.api_server``
(docker/Dockerfile at vllm commit 0000977, spring 2025; a maintainer says so in vllm#17172, May 2025;
``:latest`` still had it in vllm#22072, Aug 2025) and is ``vllm serve`` now (docker/Dockerfile at
commit dead20b; ``:latest`` had it by vllm#32292, Jan 2026, and 0.17.1 in vllm#37133). The release
that switched could not be pinned from the sources at hand, so the command does not depend on it: the
model goes as ``--model MODEL``, which api_server requires and ``vllm serve`` still takes: its parser
moves it to the positional, warning that the option "will be removed in a future version"
(vllm/utils/argparse_utils.py, 0.32.0). When a release drops it, gate the positional form from there.
``lmsysorg/sglang`` sets no engine entrypoint (sglang docker/Dockerfile), so its command is the whole
``python3 -m sglang.launch_server ...``.

Version gates: the releases whose parser accepts a flag, read in the engines' released code (vLLM:
vllm/engine/arg_utils.py, vllm/entrypoints/openai/{cli_args,api_server}.py in the PyPI wheels 0.4.0,
0.4.0.post1, 0.4.1, 0.4.2, 0.4.3 and 0.5.0; SGLang: python/sglang/srt/server_args.py and its HTTP
server in the wheels 0.3.5, 0.3.5.post1, 0.3.5.post2, 0.3.6, 0.4.0, 0.4.1.post5 to post7, 0.4.2, 0.5.5,
0.5.6 and 0.5.23). Below an engine's floor nothing is built.

====================================  ==========================  ===========================================
flag                                  accepted in                 what the wheels show
====================================  ==========================  ===========================================
vLLM (floor)                          0.4.0 on                    every flag below but the KV values, GET
                                                                  /version and env VLLM_API_KEY
vLLM ``--kv-cache-dtype fp8``         0.4.1 on                    choices [auto, fp8_e5m2] in 0.4.0, [auto,
                                                                  fp8] in 0.4.1 and 0.4.2 (vllm#3290)
vLLM ``--kv-cache-dtype fp8_e5m2``    0.4.0 (before 0.4.1),       renamed "fp8" in 0.4.1; back beside it in
                                      0.4.3 on                    0.4.3: [auto, fp8, fp8_e5m2, fp8_e4m3]
vLLM ``--kv-cache-dtype fp8_e4m3``    0.4.3 on                    as above; "fp8" is E4M3 since
                                                                  (vllm/config/cache.py), E5M2 on CUDA before
vLLM ``--disable-log-requests``       0.4.0 to before 0.10.1      on by default until 0.10.1, whose wheel has
                                                                  ``--enable-log-requests`` (default off) and
                                                                  the old flag deprecated (vllm#21739): not
                                                                  needed from there, gone in later releases
vLLM ``--disable-uvicorn-access-log`` 0.8.2 on                    not in the 0.8.0 or 0.8.1 wheels'
                                                                  entrypoints/openai/cli_args.py, in 0.8.2's
                                                                  (vllm#14754), in 0.32.0's launchers/cli_args
SGLang (floor)                        0.4.0 on                    0.4.0 answers GET /get_server_info with its
                                                                  version; 0.3.6 has only /get_server_args
SGLang ``--enable-metrics``           0.3.5.post1 on              not in 0.3.5 (added by sglang#1853)
SGLang ``--revision``                 0.4.0 on                    not in 0.3.6
SGLang ``--kv-cache-dtype fp8_e5m2``  0.3.5 on (earliest read)    added by sglang#1204, Aug 2024
SGLang ``--kv-cache-dtype fp8_e4m3``  0.4.1.post6 on              choices [auto, fp8_e5m2] in 0.4.1.post5
                                                                  (sglang#2786)
vLLM ``--enable-auto-tool-choice``,   0.6.0 on                    not in 0.5.5 (vllm/entrypoints/openai/
``--tool-call-parser``                                            cli_args.py)
vLLM ``--enable-prompt-tokens-        0.7.0 on                    not in 0.6.0 (the releases between were not
details``                                                         read); prompt_tokens_details.cached_tokens
vLLM ``--reasoning-parser``           0.7.1 on                    not in 0.7.0
vLLM ``--enable-reasoning``           0.7.1 to before 0.9.0       needed beside the parser until 0.9.0 marked
                                                                  it deprecated (arg_utils.py); gone by 0.32
SGLang ``--tool-call-parser``         0.4.2 on                    not in 0.4.1 (sglang/srt/server_args.py)
SGLang ``--reasoning-parser``         0.4.4 on                    not in 0.4.3
====================================  ==========================  ===========================================

The tool-call and reasoning parsers come from engines.parsers (the model family's); they are optional: a
version without the flag gets none (and refuses tools, as the console warns). SGLang takes tools whenever a
parser is set; vLLM needs ``--enable-auto-tool-choice`` beside it. The parser flags were read in the wheels
vLLM 0.5.5, 0.6.0, 0.7.0, 0.7.1, 0.8.5, 0.9.0 and SGLang 0.4.0 to 0.4.4 and 0.5.5.

``--max-num-seqs`` needs no gate: every vLLM from the floor on has it (0.4.0 wheel; ``SchedulerConfig``
in vllm/engine/arg_utils.py now). Nor do the rest: each is in every wheel named, and in main.

Flags emitted, each read in the engine's own argument parser: in the wheels above and in current code
(vLLM: vllm/engine/arg_utils.py ``EngineArgs.add_cli_args`` at commit 002f10e; ``FrontendArgs`` in
vllm/entrypoints/openai/cli_args.py at commit 0052233, in vllm/entrypoints/launchers/cli_args.py by
0.32.0; SGLang 0.5.23: sglang/srt/arg_groups/fields/{model,schedule,serving,parallel,observability}.py).
Whole commands from these builders were also parsed by the releases' own parsers: vLLM 0.4.0, 0.4.1,
0.4.2, 0.4.3 and 0.5.0 (cli_args.make_arg_parser) and an installed vLLM 0.32.0 (``vllm serve``);
SGLang 0.4.0, 0.4.1.post6, 0.4.2, 0.5.5, 0.5.6 and 0.5.23 (ServerArgs.add_cli_args), user aliases
such as ``-tp 4`` and ``--tp 4`` included:

========================  ==============================  ================================================
what                      vLLM                            SGLang
========================  ==============================  ================================================
model                     ``--model``                     ``--model-path`` (alias ``--model`` in 0.5.x)
pinned revision           ``--revision``                  ``--revision``
name clients send         ``--served-model-name``         ``--served-model-name``
listen                    ``--host``, ``--port``          ``--host``, ``--port``
per-launch API key        env ``VLLM_API_KEY`` (envs.py)  ``--api-key`` (ServerArgs.api_key: no env
                                                          fallback, so it is in the container's argv)
tensor parallel           ``--tensor-parallel-size``      ``--tp-size`` (alias ``--tensor-parallel-size``)
memory share (0–1)        ``--gpu-memory-utilization``    ``--mem-fraction-static``
context (tokens)          ``--max-model-len``             ``--context-length``
sequences at once         ``--max-num-seqs``              ``--max-running-requests``
KV cache dtype            ``--kv-cache-dtype``            ``--kv-cache-dtype`` (no plain "fp8" choice)
Prometheus ``/metrics``   always on                       ``--enable-metrics`` (off by default)
========================  ==============================  ================================================

SGLang's fraction is not vLLM's: vLLM's share holds weights, activations and KV cache; SGLang's
"static" share holds the weights and KV pool, of the memory free before loading, and activations and
CUDA graphs use the rest (sglang/srt/mem_cache/kv_cache_configurator.py ``_profile_available_bytes``
in 0.5.23). So the same number gives SGLang about the plan's KV pool plus the plan's activation
estimate; sizing for SGLang's own accounting is the planner's to do, not this module's.
``--trust-remote-code`` is never added: an admin sets it per model among the user flags.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from engines.engine_version import parse_version
from engines.planner import GpuPlan
from engines.sglang_launcher import API_KEY_ENV, launcher_program

VLLM_MIN_VERSION = "0.4.0"
SGLANG_MIN_VERSION = "0.4.0"
SGLANG_PROGRAM = launcher_program("python3")  # the key from the environment (engines.sglang_launcher)
LISTEN_HOST = "0.0.0.0"  # noqa: S104 - inside its container, on Hearth's internal network only

type Gate = tuple[str, str | None]  # (flag, value), the value None for a switch or for any value
type Span = tuple[str, str | None]  # [first version that accepts it, first that no longer does), None: still does
type Wanted = tuple[str, str | None, bool]  # (flag, value or None for a switch, required?)

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
}
SGLANG_GATES: dict[Gate, tuple[Span, ...]] = {
    ("--tool-call-parser", None): (("0.4.2", None),),
    ("--reasoning-parser", None): (("0.4.4", None),),
    ("--enable-metrics", None): (("0.3.5.post1", None),),
    ("--revision", None): (("0.4.0", None),),
    ("--kv-cache-dtype", "fp8_e5m2"): (("0.3.5", None),),
    ("--kv-cache-dtype", "fp8_e4m3"): (("0.4.1.post6", None),),
}

# Other spellings each parser maps to the canonical flag. Both parsers also take any unambiguous
# prefix (argparse's allow_abbrev, on in both). Newer vLLM's FlexibleArgumentParser takes "_" for "-"
# (vllm/utils/argparse_utils.py); vLLM 0.4.x's and SGLang's plain argparse refuse it (sglang#5032), so a
# command with it fails there either way: reading it as the flag keeps one rule and adds no duplicate.
VLLM_ALIASES = {"-tp": "--tensor-parallel-size"}  # vllm/engine/arg_utils.py (not yet in 0.4.x)
SGLANG_ALIASES = {"--tensor-parallel-size": "--tp-size", "--model": "--model-path"}  # server_args.py

# Flags Hearth must own: the gateway reaches the engine by them. A user value is refused, not dropped.
VLLM_OWNED = ("--model", "--served-model-name", "--host", "--port", "--api-key", "--uds")
SGLANG_OWNED = ("--model-path", "--served-model-name", "--host", "--port", "--api-key")

# Every flag these builders emit, as verified in the parsers named in the module docstring.
VLLM_FLAGS = frozenset({"--model", "--served-model-name", "--host", "--port", "--revision",
                        "--tensor-parallel-size", "--gpu-memory-utilization", "--max-model-len", "--max-num-seqs",
                        "--kv-cache-dtype", "--enable-auto-tool-choice", "--tool-call-parser",
                        "--enable-prompt-tokens-details", "--reasoning-parser", "--enable-reasoning",
                        "--disable-log-requests", "--disable-uvicorn-access-log"})  # fmt: skip
# The engine's log is for its own story (loading, errors, its stats), not a line per request: the gateway
# logs every request (console.observability's RequestLog), and the metric scrapes would fill it every few
# seconds. Both are optional: a version without the flag is left as it is.
VLLM_QUIET: list[Wanted] = [("--disable-log-requests", None, False), ("--disable-uvicorn-access-log", None, False)]
SGLANG_FLAGS = frozenset({"--model-path", "--served-model-name", "--host", "--port", "--api-key", "--revision",
                          "--tp-size", "--mem-fraction-static", "--context-length", "--max-running-requests",
                          "--kv-cache-dtype", "--enable-metrics", "--tool-call-parser",
                          "--reasoning-parser"})  # fmt: skip

# KV cache dtype in the plan → each engine's value. vLLM's "fp8" is E4M3 (vllm/config/cache.py);
# SGLang has no plain "fp8" (its choices start auto, fp8_e5m2, fp8_e4m3).
VLLM_KV_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
SGLANG_KV_DTYPES = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}



@dataclass(frozen=True)
class EngineArgs:
    """What a container runs. ``command``: the engine's arguments after the image's entrypoint (for
    SGLang the whole ``python3 -m sglang.launch_server ...``): Hearth's own flags (model, name, host,
    port; SGLang's key), then ``added``, then the user's flags as given. ``env``: the environment the
    engine needs. ``added``: the optional flags Hearth chose, with their values, in order. The repr
    leaves out ``command`` and ``env``, which hold the per-launch API key."""

    command: list[str] = field(repr=False)
    env: dict[str, str] = field(repr=False)
    added: list[str]


def user_flag_names(user_args: Sequence[str], aliases: Mapping[str, str]) -> set[str]:
    """The flags in ``user_args`` as the engine reads them: ``--flag value`` or ``--flag=value``,
    ``_`` for ``-`` in long names, and ``aliases`` mapped to their canonical flag. Values (a negative
    number among them) are skipped; nothing after a bare ``--`` is a flag."""
    names: set[str] = set()
    for arg in user_args:
        if arg == "--":
            break
        if not arg.startswith("-") or arg == "-" or arg[1:2].isdigit() or arg[1:2] == ".":
            continue
        name = arg.split("=", 1)[0]
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        names.add(aliases.get(name, name))
    return names


def set_by_user(flag: str, names: set[str]) -> bool:
    """Whether the user set ``flag``, by its name or an abbreviation argparse would expand to it."""
    return any(n == flag or (n.startswith("--") and len(n) > 2 and flag.startswith(n)) for n in names)


def _check(version: str, minimum: str, engine: str, names: set[str], owned: Sequence[str]) -> tuple[int, ...]:
    parsed = parse_version(version)
    if parsed < parse_version(minimum):
        raise ValueError(f"{engine} {version} is older than the oldest {engine} Hearth builds flags for ({minimum}).")
    if taken := [flag for flag in owned if set_by_user(flag, names)]:
        raise ValueError(f"{', '.join(taken)}: Hearth sets these itself (the gateway relies on them).")
    return parsed


def _check_key(engine: str, key: str) -> None:
    if not key:
        raise ValueError(f"A {engine} engine needs a per-launch API key; an empty one would leave it open.")


def _accepts(version: tuple[int, ...], spans: Sequence[Span]) -> bool:
    return any(parse_version(a) <= version and (b is None or version < parse_version(b)) for a, b in spans)


def _gated(
    engine: str, version: str, wanted: Sequence[Wanted], gates: Mapping[Gate, Sequence[Span]], names: set[str]
) -> list[str]:
    """``(flag, value, required)`` the user did not set and the version accepts, flattened in order. A
    required flag the version refuses raises ValueError (the plan would not hold without it); an
    optional one is left out."""
    parsed = parse_version(version)
    added: list[str] = []
    for flag, value, required in wanted:
        if set_by_user(flag, names):
            continue
        spans = gates.get((flag, value)) or gates.get((flag, None))
        if spans and not _accepts(parsed, spans):
            if required:
                shown = f"{flag} {value}" if value else flag
                where = " and ".join(f"{a} or newer" if b is None else f"{a} to before {b}" for a, b in spans)
                raise ValueError(f"{engine} {version} does not take {shown}; {engine} takes it in {where}.")
            continue
        added += [flag] if value is None else [flag, value]
    return added


def _kv_dtype(plan: GpuPlan, table: Mapping[str, str], engine: str) -> str | None:
    if plan.kv_cache_dtype == "auto":
        return None
    if plan.kv_cache_dtype not in table:
        raise ValueError(f"{engine} takes no KV cache dtype {plan.kv_cache_dtype!r} from Hearth ({', '.join(table)}).")
    return table[plan.kv_cache_dtype]


def _checked_plan(plan: GpuPlan) -> GpuPlan:
    if not plan.fits or plan.tensor_parallel_size < 1:
        raise ValueError("This plan does not fit, so there is nothing to launch: " + " ".join(plan.reasons[-1:]))
    return plan


def _identity(model: str, served_model_name: str, port: int) -> None:
    if not model or not served_model_name:
        raise ValueError("An engine needs a model and a served model name.")
    if not 1 <= port <= 65535:
        raise ValueError(f"Port {port} is not a TCP port (1 to 65535).")


def parser_flags(engine: str, tool_call_parser: str | None, reasoning_parser: str | None) -> list[Wanted]:
    """The optional flags of the model's parsers (engines.parsers) in ``engine``'s ("vllm" or "sglang")
    spelling; gated by version in _gated, never over a flag the user set."""
    wanted: list[Wanted] = []
    if tool_call_parser:
        wanted += [("--enable-auto-tool-choice", None, False)] if engine == "vllm" else []
        wanted.append(("--tool-call-parser", tool_call_parser, False))
    if reasoning_parser:
        wanted.append(("--reasoning-parser", reasoning_parser, False))
        wanted += [("--enable-reasoning", None, False)] if engine == "vllm" else []
    return wanted


def vllm_planned_flags(
    *, version: str, revision: str | None, plan: GpuPlan, user_args: Sequence[str] = (),
    tool_call_parser: str | None = None, reasoning_parser: str | None = None,
) -> list[str]:  # fmt: skip
    """The optional flags Hearth adds to vLLM ``version``'s command for ``plan``, with their values, in
    order (``EngineArgs.added``): ``--revision`` when given, then tensor parallel size,
    gpu_memory_utilization (0–1), max_model_len and max_num_seqs (tokens, sequences), the KV cache
    dtype unless "auto"; ``--enable-prompt-tokens-details`` (cached prompt tokens in usage, which the
    gateway turns into Anthropic's cache_read_input_tokens); the model's tool-call and reasoning parsers
    when given (parser_flags). None overrides a flag in ``user_args`` (aliases and abbreviations
    included). Cluster exports (engines.export) carry these as they are. Raises ValueError for an
    unparseable or too old version, a user flag Hearth owns (model, name, host, port, key, socket), a
    plan that does not fit, or a KV dtype this version does not take.
    """
    names = user_flag_names(user_args, VLLM_ALIASES)
    _check(version, VLLM_MIN_VERSION, "vLLM", names, VLLM_OWNED)
    plan = _checked_plan(plan)
    wanted: list[Wanted] = [("--revision", revision, True)] if revision else []
    wanted += [
        ("--tensor-parallel-size", str(plan.tensor_parallel_size), True),
        ("--gpu-memory-utilization", f"{plan.gpu_memory_utilization:.2f}", True),
        ("--max-model-len", str(plan.max_model_len), True),
        ("--max-num-seqs", str(plan.max_num_seqs), True),
    ]
    if kv := _kv_dtype(plan, VLLM_KV_DTYPES, "vLLM"):
        wanted.append(("--kv-cache-dtype", kv, True))
    wanted.append(("--enable-prompt-tokens-details", None, False))
    wanted += parser_flags("vllm", tool_call_parser, reasoning_parser)
    return _gated("vLLM", version, wanted, VLLM_GATES, names)


def vllm_quiet_flags(*, version: str, user_args: Sequence[str] = ()) -> list[str]:
    """VLLM_QUIET's log flags that vLLM ``version`` takes and the user did not set (``vllm_args`` adds them
    after the planned ones). Raises ValueError for an unparseable version."""
    return _gated("vLLM", version, VLLM_QUIET, VLLM_GATES, user_flag_names(user_args, VLLM_ALIASES))


def vllm_args(
    *, version: str, model: str, revision: str | None, served_model_name: str, port: int, api_key: str,
    plan: GpuPlan, user_args: Sequence[str] = (), tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> EngineArgs:  # fmt: skip
    """The ``vllm/vllm-openai`` container's arguments for ``plan`` on vLLM ``version``.

    ``model`` is a Hugging Face repo id or a path inside the container; ``port`` the TCP port it
    listens on (all interfaces of its container); the API key goes in env ``VLLM_API_KEY``, never the
    argv. The flags from the plan (and the model's parsers) are vllm_planned_flags', then
    vllm_quiet_flags'. Raises ValueError as vllm_planned_flags does, and for an empty key.
    """
    _identity(model, served_model_name, port)
    _check_key("vLLM", api_key)
    added = vllm_planned_flags(version=version, revision=revision, plan=plan, user_args=user_args,
                               tool_call_parser=tool_call_parser, reasoning_parser=reasoning_parser)  # fmt: skip
    added += vllm_quiet_flags(version=version, user_args=user_args)
    own = ["--model", model, "--served-model-name", served_model_name, "--host", LISTEN_HOST, "--port", str(port)]
    return EngineArgs(command=[*own, *added, *user_args], env={"VLLM_API_KEY": api_key}, added=added)


def sglang_args(
    *, version: str, model: str, revision: str | None, served_model_name: str, port: int, api_key: str,
    plan: GpuPlan, user_args: Sequence[str] = (), tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> EngineArgs:  # fmt: skip
    """The ``lmsysorg/sglang`` container's command for ``plan`` on SGLang ``version``.

    As vllm_args, with SGLang's names: ``--tp-size``, ``--mem-fraction-static`` (the plan's
    gpu_memory_utilization, 0–1), ``--context-length``, ``--max-running-requests``, the KV dtype as
    fp8_e4m3 / fp8_e5m2, and ``--enable-metrics`` (its /metrics is off without it; left out, not
    refused, where the version lacks it), and the model's parsers when given (parser_flags). The API key
    goes in env API_KEY_ENV, which the launcher turns into ``--api-key`` (engines.sglang_launcher).
    Raises ValueError as vllm_args does (Hearth owns the model path, name, host, port and key).
    """
    _identity(model, served_model_name, port)
    names = user_flag_names(user_args, SGLANG_ALIASES)
    _check(version, SGLANG_MIN_VERSION, "SGLang", names, SGLANG_OWNED)
    _check_key("SGLang", api_key)
    plan = _checked_plan(plan)
    wanted: list[Wanted] = [("--revision", revision, True)] if revision else []
    wanted += [
        ("--tp-size", str(plan.tensor_parallel_size), True),
        ("--mem-fraction-static", f"{plan.gpu_memory_utilization:.2f}", True),
        ("--context-length", str(plan.max_model_len), True),
        ("--max-running-requests", str(plan.max_num_seqs), True),
    ]
    if kv := _kv_dtype(plan, SGLANG_KV_DTYPES, "SGLang"):
        wanted.append(("--kv-cache-dtype", kv, True))
    wanted.append(("--enable-metrics", None, False))
    wanted += parser_flags("sglang", tool_call_parser, reasoning_parser)
    added = _gated("SGLang", version, wanted, SGLANG_GATES, names)
    own = [*SGLANG_PROGRAM, "--model-path", model, "--served-model-name", served_model_name,
           "--host", LISTEN_HOST, "--port", str(port)]  # fmt: skip
    return EngineArgs(command=[*own, *added, *user_args], env={API_KEY_ENV: api_key}, added=added)
