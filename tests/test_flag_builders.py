"""One flag builder per engine: the same user flags, fed to every runtime's launch (a local process and a
container, the CPU engines, the simulator and the GPU images, through lifecycle.launch_spec), end every command
as given, and Hearth never adds a second value for a flag the user set, however they spelled it.

A command is read back with the engine's own parser (engines.argspec, the dump of the installed engine):
every option it sets must be set once. tests/test_engine_parsers.py checks that parser against the real one.
"""

import json
from collections import Counter
from pathlib import Path

import pytest
from django.test import override_settings

from console.catalog.models import ModelSource
from console.deployments import admin_actions
from console.deployments.lifecycle import launch_spec
from console.deployments.models import Deployment, Replica
from engines import sglang_flags, vllm_flags
from engines.adapters import SGLANG_PROGRAM
from engines.argspec import Reading
from tests.simworld import ensure_model

pytestmark = pytest.mark.django_db
CONFIG = json.loads((Path(__file__).parent / "data" / "smollm2-135m-config.json").read_text())

# (engine, runtime) for each way Hearth starts an engine of the family.
VLLM_RUNS = [("vllm-cpu", "process"), ("vllm-cpu", "docker"), ("simulator", "process"), ("simulator", "docker")]
VLLM_RUNS += [("vllm", "docker")]
SGLANG_RUNS = [("sglang-cpu", "process"), ("sglang", "docker")]

# user flags → (the flag they set, the value the engine must end with)
VLLM_CASES = [
    (["--max-model", "2048"], "--max-model-len", "2048"),  # an abbreviation vLLM's argparse expands
    (["--max-model-len=2048"], "--max-model-len", "2048"),
    (["--max_model_len", "2048"], "--max-model-len", "2048"),  # FlexibleArgumentParser: "_" for "-"
    (["-tp", "2"], "--tensor-parallel-size", "2"),
    (["--tensor_parallel_size=2", "--seed", "-5"], "--tensor-parallel-size", "2"),
    (["--gpu-memory-util", "0.5"], "--gpu-memory-utilization", "0.5"),
    (["--no-enable-prompt-tokens-details"], "--enable-prompt-tokens-details", None),  # its --no- form
    (["--max-model", "2048", "--bogus-flag", "7"], "--max-model-len", "2048"),  # unknown flags pass as they are
]
SGLANG_CASES = [
    (["--context-len", "2048"], "--context-length", "2048"),
    (["--context-length=2048"], "--context-length", "2048"),
    (["--context_length", "2048"], "--context-length", "2048"),  # SGLang refuses it; Hearth adds no second one
    (["--tp", "2"], "--tp-size", "2"),
    (["--tensor-parallel-size", "2"], "--tp-size", "2"),  # its alias
    (["--max-total", "9000"], "--max-total-tokens", "9000"),
]


def deployments(engines: list[str]) -> dict[str, Deployment]:
    """A deployment planned for each engine: the CPU engines on a local model, the GPU ones on the simulated
    GPU box (vLLM and SGLang images are planned as the simulator is, then switched, as test_docker_spec does)."""
    smol = ModelSource.objects.create(
        name="smol", kind="local", path="/models/smol", config=CONFIG, weights_bytes=269_030_016
    )
    ensure_model()
    llama = ModelSource.objects.get(name="llama-8b")
    made: dict[str, Deployment] = {}
    for engine in engines:
        if engine in ("vllm-cpu", "sglang-cpu"):
            with override_settings(HEARTH_SGLANG_CPU_PYTHON=__file__, HEARTH_RUNTIME="process"):
                dep = admin_actions.create_deployment(
                    name=engine, model=smol, engine=engine, max_model_len=4096, kv_space_gib=1.0
                )
        else:
            dep = admin_actions.create_deployment(name=engine, model=llama, engine="simulator", max_model_len=8192)
            Deployment.objects.filter(pk=dep.pk).update(engine=engine)
        made[engine] = dep
    return made


def launched(dep: Deployment, runtime: str, user: list[str]) -> list[str]:
    """The engine's arguments (after any program) when ``dep`` runs with ``user`` as its extra flags. The flags go
    in past the console's check, which refuses the ones the plan decides: the launch must still read them right."""
    Deployment.objects.filter(pk=dep.pk).update(extra_args=user)
    dep.refresh_from_db()
    replica = Replica(
        deployment=dep, runtime=runtime, host="127.0.0.1", port=8001, engine_api_key="k", runtime_name="r"
    )
    with override_settings(HEARTH_SGLANG_CPU_PYTHON="/venv/bin/python"):
        args = launch_spec(dep, replica).args
    return args[len(SGLANG_PROGRAM) :] if args[: len(SGLANG_PROGRAM)] == SGLANG_PROGRAM else args


def assert_read_once(read: Reading, user: list[str], flag: str, value: str | None) -> None:
    twice = [dest for dest, count in Counter(g.dest for g in read.given).items() if count > 1]
    assert twice == [], f"set more than once: {twice}"
    (given,) = [g for g in read.given if g.dest == read.spec.dest_of(flag)]
    assert given.value == value  # the user's, not Hearth's


@pytest.mark.parametrize(("user", "flag", "value"), VLLM_CASES)
def test_every_vllm_runtime_reads_the_users_flags_as_vllm_does(user: list[str], flag: str, value: str | None) -> None:
    made = deployments(sorted({engine for engine, _ in VLLM_RUNS}))
    for engine, runtime in VLLM_RUNS:
        args = launched(made[engine], runtime, user)
        assert args[-len(user) :] == user, (engine, runtime)  # the user's part, as given, last
        read = vllm_flags.user_flags(args, simulator=engine == "simulator")
        assert_read_once(read, user, flag, value)
        assert read.unknown == (("--bogus-flag", "7") if "--bogus-flag" in user else ())


@pytest.mark.parametrize(("user", "flag", "value"), SGLANG_CASES)
def test_every_sglang_runtime_reads_the_users_flags_as_sglang_does(user: list[str], flag: str, value: str) -> None:
    made = deployments(sorted({engine for engine, _ in SGLANG_RUNS}))
    for engine, runtime in SGLANG_RUNS:
        args = launched(made[engine], runtime, user)
        assert args[-len(user) :] == user, (engine, runtime)
        assert_read_once(sglang_flags.user_flags(args), user, flag, value)


def test_the_cpu_path_no_longer_adds_a_second_context_to_an_abbreviated_one() -> None:
    # The bug: given --max-model 2048, vLLM CPU still added --max-model-len 4096; the GPU image did not.
    made = deployments(["vllm-cpu", "vllm"])
    for engine, runtime in [("vllm-cpu", "process"), ("vllm", "docker")]:
        args = launched(made[engine], runtime, ["--max-model", "2048"])
        assert "--max-model-len" not in args and args[-2:] == ["--max-model", "2048"]


def test_a_flag_hearth_owns_is_refused_on_every_runtime_not_passed() -> None:
    from appliance.runtimes import RuntimeError_

    made = deployments(sorted({engine for engine, _ in VLLM_RUNS + SGLANG_RUNS}))
    for engine, runtime in VLLM_RUNS + SGLANG_RUNS:
        with pytest.raises(RuntimeError_, match="Hearth sets these itself"):
            launched(made[engine], runtime, ["--por", "9000"])  # a prefix of --port


def test_flags_the_engines_parser_would_refuse_fail_the_launch_with_its_words() -> None:
    from appliance.runtimes import RuntimeError_

    made = deployments(["vllm-cpu", "sglang-cpu"])
    with pytest.raises(RuntimeError_, match="ambiguous option: --max could match"):
        launched(made["vllm-cpu"], "process", ["--max", "2048"])
    with pytest.raises(RuntimeError_, match="expected one argument"):
        launched(made["sglang-cpu"], "process", ["--context-length"])
