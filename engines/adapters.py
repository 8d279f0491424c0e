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

Flags: each engine family's rules, its version gates and the sources they were read in live in one module,
engines.vllm_flags and engines.sglang_flags, which the CPU engines and the simulator use too; a user's flags are
read there by the engine's own argument parser (engines.argspec). This module puts a container's command
together. The names each engine gives the plan's settings (read in the parsers the families name):

========================  ==============================  ================================================
what                      vLLM                            SGLang
========================  ==============================  ================================================
model                     ``--model``                     ``--model-path`` (alias ``--model`` in 0.5.x)
pinned revision           ``--revision``                  ``--revision``
name clients send         ``--served-model-name``         ``--served-model-name``
listen                    ``--host``, ``--port``          ``--host``, ``--port``
per-launch API key        env ``VLLM_API_KEY`` (envs.py)  ``--api-key`` (ServerArgs.api_key: no env
                                                          fallback; engines.sglang_launcher adds it)
tensor parallel           ``--tensor-parallel-size``      ``--tp-size`` (alias ``--tensor-parallel-size``)
memory share (0–1)        ``--gpu-memory-utilization``    ``--mem-fraction-static``
context (tokens)          ``--max-model-len``             ``--context-length``
sequences at once         ``--max-num-seqs``              ``--max-running-requests``
KV cache dtype            ``--kv-cache-dtype``            ``--kv-cache-dtype`` (no plain "fp8" choice)
Prometheus ``/metrics``   always on                       ``--enable-metrics`` (off by default)
========================  ==============================  ================================================

The tool-call and reasoning parsers come from engines.parsers (the model family's); they are optional: a
version without the flag gets none (and refuses tools, as the console warns).

SGLang's fraction is not vLLM's: vLLM's share holds weights, activations and KV cache; SGLang's
"static" share holds the weights and KV pool, of the memory free before loading, and activations and
CUDA graphs use the rest (sglang/srt/mem_cache/kv_cache_configurator.py ``_profile_available_bytes``
in 0.5.23). So the same number gives SGLang about the plan's KV pool plus the plan's activation
estimate; sizing for SGLang's own accounting is the planner's to do, not this module's.
``--trust-remote-code`` is never added: an admin sets it per model among the user flags.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

from engines import sglang_flags, vllm_flags
from engines.planner import GpuPlan
from engines.sglang_launcher import API_KEY_ENV, launcher_program

SGLANG_PROGRAM = launcher_program("python3")  # the key from the environment (engines.sglang_launcher)
LISTEN_HOST = "0.0.0.0"  # noqa: S104 - inside its container, on Hearth's internal network only


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


def _check_key(engine: str, key: str) -> None:
    if not key:
        raise ValueError(f"A {engine} engine needs a per-launch API key; an empty one would leave it open.")


def _identity(model: str, served_model_name: str, port: int) -> None:
    if not model or not served_model_name:
        raise ValueError("An engine needs a model and a served model name.")
    if not 1 <= port <= 65535:
        raise ValueError(f"Port {port} is not a TCP port (1 to 65535).")


def vllm_args(
    *,
    version: str,
    model: str,
    revision: str | None,
    served_model_name: str,
    port: int,
    api_key: str,
    plan: GpuPlan,
    user_args: Sequence[str] = (),
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
    sleep_mode: bool = False,
) -> EngineArgs:
    """The ``vllm/vllm-openai`` container's arguments for ``plan`` on vLLM ``version``.

    ``model`` is a Hugging Face repo id or a path inside the container; ``port`` the TCP port it
    listens on (all interfaces of its container); the API key goes in env ``VLLM_API_KEY``, never the
    argv. The flags from the plan (and the model's parsers) are vllm_flags.gpu_flags', then
    vllm_flags.quiet_flags'. ``sleep_mode`` (engines.sleep_support decides where): ``--enable-sleep-mode`` and
    vllm_flags.SLEEP_MODE_ENV. Raises ValueError as gpu_flags does, and for an empty key.
    """
    _identity(model, served_model_name, port)
    _check_key("vLLM", api_key)
    added = vllm_flags.gpu_flags(
        version=version,
        revision=revision,
        plan=plan,
        user_args=user_args,
        tool_call_parser=tool_call_parser,
        reasoning_parser=reasoning_parser,
        sleep_mode=sleep_mode,
    )
    added += vllm_flags.quiet_flags(version=version, user_args=user_args)
    own = ["--model", model, "--served-model-name", served_model_name, "--host", LISTEN_HOST, "--port", str(port)]
    env = {"VLLM_API_KEY": api_key, **(vllm_flags.SLEEP_MODE_ENV if sleep_mode else {})}
    return EngineArgs(command=[*own, *added, *user_args], env=env, added=added)


def sglang_args(
    *,
    version: str,
    model: str,
    revision: str | None,
    served_model_name: str,
    port: int,
    api_key: str,
    plan: GpuPlan,
    user_args: Sequence[str] = (),
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> EngineArgs:
    """The ``lmsysorg/sglang`` container's command for ``plan`` on SGLang ``version``.

    As vllm_args, with SGLang's names and flags (sglang_flags.gpu_flags): ``--tp-size``,
    ``--mem-fraction-static``, ``--context-length``, ``--max-running-requests``, the KV dtype,
    ``--enable-metrics`` and the model's parsers. The API key goes in env API_KEY_ENV, which the launcher
    turns into ``--api-key`` (engines.sglang_launcher). Raises ValueError as gpu_flags does (Hearth owns the
    model path, name, host, port and key), and for an empty key.
    """
    _identity(model, served_model_name, port)
    added = sglang_flags.gpu_flags(
        version=version,
        revision=revision,
        plan=plan,
        user_args=user_args,
        tool_call_parser=tool_call_parser,
        reasoning_parser=reasoning_parser,
    )
    _check_key("SGLang", api_key)
    own = [
        *SGLANG_PROGRAM,
        "--model-path",
        model,
        "--served-model-name",
        served_model_name,
        "--host",
        LISTEN_HOST,
        "--port",
        str(port),
    ]
    return EngineArgs(command=[*own, *added, *user_args], env={API_KEY_ENV: api_key}, added=added)
