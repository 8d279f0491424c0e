"""Which idle policies each engine and version can do: stay up, sleep (level 1 or 2), or stop (issue 29).

Pure: an engine kind and a version in, the policies and sleep levels it supports, or why not, out. The console
refuses a policy an engine cannot do with ``refusal``'s words; the launch adds sleep mode's flag and environment
(engines.vllm_flags) only where ``supports_sleep`` says so.

Sleep needs the engine's sleep mode (``--enable-sleep-mode``) and its HTTP routes, which vLLM serves only with
``VLLM_SERVER_DEV_MODE=1`` (engines/simulator/SLEEP.md). Read in vLLM's PyPI wheels
(vllm/entrypoints/openai/api_server.py, the ``if envs.VLLM_SERVER_DEV_MODE:`` block; vllm/engine/arg_utils.py):

====================================  ==========  =====================================================
what Hearth uses                      from        what the wheels show
====================================  ==========  =====================================================
``--enable-sleep-mode``               0.7.0       in 0.7.0's arg_utils.py; the dev block then had only
                                                  ``/reset_prefix_cache``
``POST /sleep?level=L``,              0.7.3       not in 0.7.2; both answer an empty 200 (the body is
``POST /wake_up``                                 JSON from the 0.32 routers on), so Hearth polls:
``GET /is_sleeping``                  0.8.0       not in 0.7.3; ``{"is_sleeping": bool}`` ever since
``POST /wake_up?tags=...``            0.8.3       ``query_params.getlist("tags")``, not in 0.8.2
``POST /collective_rpc``              0.10.2      not in 0.10.1 (0.10.1's workers have
                                                  ``reload_weights``, its server no route to it)
====================================  ==========  =====================================================

So level 1 (sleep, wake, ask whether asleep) from 0.8.0, and level 2, whose wake is ``wake_up?tags=weights``,
``collective_rpc reload_weights``, ``wake_up?tags=kv_cache`` (docs/features/sleep_mode.md), from 0.10.2. vLLM
0.32.0 still has them all (engines/simulator/SLEEP.md), and the simulator answers as 0.32.0 does.

Elsewhere: the CPU engines stop (vLLM CPU refuses ``--enable-sleep-mode``: "Sleep mode is not supported on current
platform"; SGLang CPU lacks torch_memory_saver); SGLang on GPUs stops too for now (its release_memory_occupation
asserts an idle scheduler and takes the server down otherwise, SLEEP.md); an external deployment stays (Hearth
does not run its engines).
"""

from enum import StrEnum

from engines.engine_version import parse_version
from engines.external import EXTERNAL_ENGINE
from engines.launch import EngineKind


class IdlePolicy(StrEnum):
    """What happens to a deployment after its idle minutes without a request; the value is stored."""

    STAY = "stay"  # always up
    SLEEP = "sleep"  # sleep at its sleep level, wake on the next request
    STOP = "stop"  # stop the engine ("stopped to save"), launch it again on the next request


SLEEP_LEVELS = (1, 2)
VLLM_SLEEP_FROM = {1: "0.8.0", 2: "0.10.2"}  # sleep level → the first vLLM release with every route it needs


def sleep_levels(engine: str, version: str) -> tuple[int, ...]:
    """The sleep levels ``engine`` at ``version`` can do: the simulator both, vLLM on GPUs from
    VLLM_SLEEP_FROM's releases, the rest none. ``version`` is vLLM's ("0.11.0" or "v0.11.0"; "" or unparseable:
    none) and matters only for vLLM."""
    if engine == EngineKind.SIMULATOR:
        return SLEEP_LEVELS
    if engine != EngineKind.VLLM:
        return ()
    try:
        parsed = parse_version(version)
    except ValueError:
        return ()
    return tuple(level for level in SLEEP_LEVELS if parsed >= parse_version(VLLM_SLEEP_FROM[level]))


def policies(engine: str, version: str) -> tuple[IdlePolicy, ...]:
    """The idle policies ``engine`` at ``version`` can do: stay everywhere, stop wherever Hearth runs the engine,
    sleep where sleep_levels has one."""
    if engine == EXTERNAL_ENGINE:
        return (IdlePolicy.STAY,)
    if sleep_levels(engine, version):
        return (IdlePolicy.STAY, IdlePolicy.SLEEP, IdlePolicy.STOP)
    return (IdlePolicy.STAY, IdlePolicy.STOP)


def supports_sleep(engine: str, version: str) -> bool:
    """Whether ``engine`` at ``version`` can sleep at all (its launch then carries sleep mode's flag and env)."""
    return bool(sleep_levels(engine, version))


def refusal(engine: str, version: str, policy: str, level: int = 1, always_on: bool = False) -> str:
    """Why ``engine`` at ``version`` cannot have idle ``policy`` at sleep ``level`` (with ``always_on``), in words
    for the admin; "" when it can. An always-on deployment stays: an idle policy besides would contradict it."""
    if policy not in IdlePolicy.__members__.values():
        return f"Unknown idle policy {policy!r}: choose stay, sleep or stop."
    if always_on and policy != IdlePolicy.STAY:
        return f"An always-on deployment stays up; an idle policy of {policy} would contradict it."
    if policy not in policies(engine, version):
        return _why_not(engine, version, policy)
    if policy == IdlePolicy.SLEEP and level not in sleep_levels(engine, version):
        if level not in SLEEP_LEVELS:
            return f"Sleep level {level} does not exist: vLLM sleeps at level 1 or 2."
        return f"vLLM {version} cannot wake from sleep level {level}: it needs vLLM {VLLM_SLEEP_FROM[level]} or newer."
    return ""


def _why_not(engine: str, version: str, policy: str) -> str:
    if engine == EXTERNAL_ENGINE:
        return "Hearth does not run this deployment's engines, so it cannot put them to sleep or stop them."
    if engine in (EngineKind.VLLM_CPU, EngineKind.SGLANG_CPU):
        return f"{EngineKind(engine).label} has no sleep mode; choose stop (Hearth stops it and launches it again)."
    if engine == EngineKind.SGLANG:
        return (
            "Hearth does not put SGLang to sleep: its release_memory_occupation takes the server down when a request "
            "is running. Choose stop."
        )
    if engine == EngineKind.VLLM:
        return f"vLLM {version or '(unknown version)'} cannot sleep: Hearth needs vLLM {VLLM_SLEEP_FROM[1]} or newer."
    return f"The {engine} engine cannot {policy}."
