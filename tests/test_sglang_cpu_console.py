"""SGLang (CPU) in the console, without starting it: offered where its venv is built, planned with SGLang's
one-token pages, launched with the plan's KV pool and the parsers chosen under SGLang's names, its remedy a
smaller pool. The real engine runs in tests/test_e2e_sglang.py."""

import json
from pathlib import Path

import pytest
from django.test import override_settings

from console.catalog.models import ModelSource
from console.deployments import admin_actions, planning
from console.deployments.lifecycle import launch_spec
from console.deployments.models import Replica
from engines.launch import EngineKind
from engines.oom_remedy import oom_remedy
from engines.sglang_launcher import API_KEY_ENV, launcher_program
from engines.stored_plan import StoredPlan

pytestmark = pytest.mark.django_db
CONFIG = json.loads((Path(__file__).parent / "data" / "smollm2-135m-config.json").read_text())
CHATML = "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' }}"


@pytest.fixture
def python(tmp_path: Path) -> str:
    interpreter = tmp_path / "venv-sglang-cpu" / "bin" / "python"
    interpreter.parent.mkdir(parents=True)
    interpreter.touch()
    return str(interpreter)


def smol() -> ModelSource:
    return ModelSource.objects.create(
        name="smol", kind="local", path="/models/smol", config=CONFIG, weights_bytes=269_030_016, chat_template=CHATML
    )


def test_sglang_cpu_is_offered_only_where_its_venv_is_built(python: str) -> None:
    with override_settings(HEARTH_SGLANG_CPU_PYTHON=python, HEARTH_RUNTIME="process"):
        assert EngineKind.SGLANG_CPU in planning.available_engines()
    with override_settings(HEARTH_SGLANG_CPU_PYTHON=python + "-missing", HEARTH_RUNTIME="process"):
        assert EngineKind.SGLANG_CPU not in planning.available_engines()
    with override_settings(HEARTH_SGLANG_CPU_PYTHON=python, HEARTH_RUNTIME="docker"):
        assert EngineKind.SGLANG_CPU not in planning.available_engines()  # a local process only


def test_it_is_planned_in_one_token_pages_and_launched_with_that_pool_and_sglangs_parser(python: str) -> None:
    with override_settings(HEARTH_SGLANG_CPU_PYTHON=python, HEARTH_RUNTIME="process"):
        dep = admin_actions.create_deployment(
            name="sg", model=smol(), engine="sglang-cpu", max_model_len=2048, kv_space_gib=1.0
        )
        assert dep.plan["kv_capacity_tokens"] == 46_603  # 2^30 / 23,040, no 128-token blocks as vLLM's
        assert dep.plan["inventory"] == "CPU (SGLang's --max-total-tokens)"
        replica = Replica(
            deployment=dep, runtime="process", host="127.0.0.1", port=60123, engine_api_key="k", runtime_name="r"
        )
        spec = launch_spec(dep, replica)
    assert spec.program == launcher_program(python) and spec.env[API_KEY_ENV] == "k"  # never in argv
    assert spec.args[spec.args.index("--max-total-tokens") + 1] == "46603"
    assert spec.args[spec.args.index("--tool-call-parser") + 1] == dep.plan["parsers"]["tool_call_parser"]
    assert "--enable-auto-tool-choice" not in spec.args  # a vLLM flag SGLang does not have
    assert spec.env["SGLANG_GRPC_PORT"] == "50123"  # above 55535 SGLang wants a gRPC port below it


def test_its_out_of_memory_remedy_shrinks_the_pool_it_is_given() -> None:
    plan = {"kv_capacity_tokens": 46_603, "max_model_len": 2048, "max_concurrency": 22.76}
    remedy = oom_remedy(EngineKind.SGLANG_CPU, StoredPlan.from_json(plan, EngineKind.SGLANG_CPU), {}, 1.0)
    assert remedy is not None and remedy.kv_space_gib == 0.75 and remedy.plan.cpu is not None
    assert remedy.plan.kv_capacity_tokens == 34_952 and remedy.plan.cpu.max_concurrency == 17.07
    assert remedy.changes[0].name == "KV cache space (--max-total-tokens)"
