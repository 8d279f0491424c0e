"""Which engines and versions can sleep or stop when idle (engines.sleep_support), the launch flags sleep mode adds
(engines.vllm_flags, engines.adapters, engines.vllm), and the idle policy's verdict (console.deployments.idling):
pure rules, no database, no process."""

import json
from pathlib import Path

import pytest

from console.deployments.idling import duration_words, idle_verdict
from engines.adapters import vllm_args
from engines.gpus import simulated_inventory
from engines.launch import EngineKind
from engines.modelconfig import parse_config
from engines.planner import GpuPlan, PlanRequest, plan_gpu
from engines.simulator.config import parse_config as simulator_config
from engines.sleep_support import IdlePolicy, policies, refusal, sleep_levels, supports_sleep
from engines.vllm import build_simulator_spec
from engines.vllm_flags import awake_bytes, gpu_flags
from tests.simworld import LLAMA_8B

STAY, SLEEP, STOP = IdlePolicy.STAY, IdlePolicy.SLEEP, IdlePolicy.STOP


def plan() -> GpuPlan:
    """Llama 3.1 8B on the simulated 8× H100 box, at 8,192 tokens."""
    config = parse_config(json.loads(Path(LLAMA_8B).read_text())["config"])
    return plan_gpu(config, 16_060_522_496, simulated_inventory("8xH100-80GB"), PlanRequest(max_model_len=8192))


@pytest.mark.parametrize(
    ("version", "levels"),
    [
        ("0.7.3", ()),  # /sleep and /wake_up, but no /is_sleeping yet
        ("0.8.0", (1,)),
        ("v0.10.1", (1,)),  # no /collective_rpc: a level-2 wake cannot reload its weights
        ("0.10.2", (1, 2)),
        ("v0.11.0", (1, 2)),
        ("0.32.0", (1, 2)),
        ("", ()),
        ("latest", ()),
    ],
)
def test_vllm_sleeps_from_the_release_that_has_every_route_a_level_needs(version: str, levels: tuple[int, ...]) -> None:
    assert sleep_levels(EngineKind.VLLM, version) == levels
    assert supports_sleep(EngineKind.VLLM, version) == bool(levels)


def test_the_simulator_sleeps_at_both_levels_and_the_cpu_engines_and_sglang_only_stop() -> None:
    assert sleep_levels(EngineKind.SIMULATOR, "") == (1, 2)
    assert policies(EngineKind.SIMULATOR, "") == (STAY, SLEEP, STOP)
    for engine in (EngineKind.VLLM_CPU, EngineKind.SGLANG_CPU, EngineKind.SGLANG):
        assert policies(engine, "0.5.19") == (STAY, STOP), engine
    assert policies("external", "") == (STAY,)


def test_a_policy_the_engine_cannot_do_is_refused_with_why() -> None:
    assert refusal(EngineKind.SIMULATOR, "", SLEEP, 2) == ""
    assert "vLLM (CPU) has no sleep mode" in refusal(EngineKind.VLLM_CPU, "", SLEEP)
    assert refusal(EngineKind.VLLM_CPU, "", STOP) == ""
    assert "release_memory_occupation" in refusal(EngineKind.SGLANG, "0.5.19", SLEEP)
    assert "needs vLLM 0.10.2 or newer" in refusal(EngineKind.VLLM, "0.9.2", SLEEP, 2)
    assert "needs vLLM 0.8.0 or newer" in refusal(EngineKind.VLLM, "0.7.3", SLEEP, 1)
    assert "does not run this deployment's engines" in refusal("external", "", STOP)
    assert "contradict" in refusal(EngineKind.SIMULATOR, "", SLEEP, always_on=True)
    assert refusal(EngineKind.SIMULATOR, "", STAY, always_on=True) == ""
    assert "Unknown idle policy" in refusal(EngineKind.SIMULATOR, "", "nap")
    assert "level 3 does not exist" in refusal(EngineKind.SIMULATOR, "", SLEEP, 3)


def test_vllm_on_gpus_launches_able_to_sleep_only_when_asked() -> None:
    common = {"model": "org/m", "revision": None, "served_model_name": "m", "port": 8000, "api_key": "k"}
    asleep = vllm_args(version="0.11.0", plan=plan(), sleep_mode=True, **common)
    assert "--enable-sleep-mode" in asleep.added and asleep.env["VLLM_SERVER_DEV_MODE"] == "1"
    awake = vllm_args(version="0.11.0", plan=plan(), **common)
    assert "--enable-sleep-mode" not in awake.command and "VLLM_SERVER_DEV_MODE" not in awake.env
    own = gpu_flags(version="0.11.0", revision=None, plan=plan(), user_args=["--enable-sleep-mode"], sleep_mode=True)
    assert "--enable-sleep-mode" not in own  # the admin's own flag is not doubled
    with pytest.raises(ValueError, match=r"takes it in 0\.7\.0 or newer"):
        gpu_flags(version="0.6.0", revision=None, plan=plan(), sleep_mode=True)


def test_the_simulator_gets_the_plan_s_sizes_and_sleep_mode_as_vllm_would() -> None:
    gpu_plan = plan()
    spec = build_simulator_spec(
        program=[], model="m", served_model_name="m", plan=gpu_plan, host="h", port=1, api_key="k", sleep_mode=True
    )
    assert spec.env["VLLM_SERVER_DEV_MODE"] == "1"
    read = simulator_config(spec.args)
    assert read.enable_sleep_mode and read.weights_bytes == 16_060_522_496
    assert read.gpu_memory_bytes == awake_bytes(gpu_plan) > read.weights_bytes  # 0.90 of an H100, TP 1
    plain = build_simulator_spec(
        program=[], model="m", served_model_name="m", plan=gpu_plan, host="h", port=1, api_key="k"
    )
    assert "--enable-sleep-mode" not in plain.args and "VLLM_SERVER_DEV_MODE" not in plain.env


NOW = 1_000_000.0


def verdict(**changes: object) -> str:
    given: dict[str, object] = {
        "now": NOW,
        "policy": SLEEP,
        "idle_minutes": 30,
        "last_request": NOW - 31 * 60,
        "ready_since": NOW - 3600,
        "in_flight": 0,
        "residency": 120.0,
    }
    return idle_verdict(**(given | changes))  # type: ignore[arg-type]


def test_the_idle_policy_says_why_it_acts_and_holds_back_otherwise() -> None:
    assert verdict() == "idle for 31 min (policy: sleep after 30 min)"
    assert verdict(policy=STOP, last_request=None) == "idle for 1 h 0 min (policy: stop after 30 min)"
    assert verdict(policy=STAY) == ""
    assert verdict(in_flight=1) == ""  # never one with a request in flight
    assert verdict(last_request=NOW - 29 * 60) == ""
    assert verdict(ready_since=NOW - 60, last_request=None, idle_minutes=1) == ""  # awake under the residency
    # a request before it became ready (before a wake) does not count: idle since it is ready
    assert verdict(last_request=NOW - 7200, ready_since=NOW - 20 * 60) == ""


def test_durations_read_as_people_say_them() -> None:
    assert [duration_words(s) for s in (45, 60 * 31, 3600 * 3 + 60 * 12, 86400 * 2 + 3600 * 4)] == [
        "45 s",
        "31 min",
        "3 h 12 min",
        "2 d 4 h",
    ]
