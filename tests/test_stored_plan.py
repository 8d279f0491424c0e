"""The stored plan (engines.stored_plan): every shape Hearth has stored reads, the planner's result survives JSON
exactly, a newer version is refused with words, and its views give a launch what it needs."""

import dataclasses
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engines.gpus import simulated_inventory
from engines.modelconfig import parse_config
from engines.planner import PlanRequest, plan_gpu
from engines.sizing import plan_cpu
from engines.stored_plan import PLAN_VERSION, AgentFact, Parsers, PlanKind, PlanVersionError, StoredPlan
from tests.test_planner import LLAMA_8B, LLAMA_8B_BYTES

ROOT = Path(__file__).resolve().parent.parent
CONFIG = parse_config(LLAMA_8B)
PARSERS = Parsers("llama3_json", None, "llama3_json", None, "Llama 3", "vLLM docs", ("Llama 3: llama3_json.",), None)
AGENTS = (AgentFact("Claude Code", True, 59_000, "fits"), AgentFact("Codex", False, 14_000, "does not fit"))
# A CPU plan as 1569688 stored it: SizingPlan's fields, nothing else.
FIRST_CPU = {
    "weights_bytes": 4096,
    "kv_bytes_per_token": 23040,
    "kv_budget_bytes": 1073741824,
    "block_size": 128,
    "kv_capacity_tokens": 46592,
    "max_model_len": 2048,
    "max_concurrency": 22.75,
    "fits": True,
    "reasons": ["Weights: 4,096 bytes."],
}
# A GPU plan as 033be24 stored it: GpuPlan's fields (a split without graphs_in_budget, before dd75c16), its inventory.
FIRST_GPU = {
    "fits": True,
    "tensor_parallel_size": 2,
    "gpu_indices": [0, 1],
    "gpu_memory_utilization": 0.9,
    "max_model_len": 8192,
    "max_num_seqs": 256,
    "kv_cache_dtype": "auto",
    "weights_bytes": 16_060_522_496,
    "kv_bytes_per_token": 131072,
    "kv_capacity_tokens": 900_000,
    "typical_context": 8192,
    "concurrency_at_typical_context": 109.86,
    "split": {
        "total": 85_520_809_984,
        "used_by_others": 0,
        "weights": 8_030_261_248,
        "activation": 1_500_000_000,
        "non_torch": 1_610_612_736,
        "kv_cache": 61_000_000_000,
        "cuda_graphs": 1_073_741_824,
        "headroom": 7_500_000_000,
    },
    "reasons": ["Weights: 14.96 GiB."],
    "remedies": [],
    "inventory": "8× NVIDIA H100 80GB HBM3 (79.6 GiB each), simulated (8xH100-80GB)",
}


def gpu_plan(replicas: int = 2) -> StoredPlan:
    """Llama-3.1-8B at TP 2 on the simulated 8×H100 box, ``replicas`` of it, as the console stores it."""
    inventory = simulated_inventory("8xH100-80GB")
    planned = plan_gpu(CONFIG, LLAMA_8B_BYTES, inventory, PlanRequest(max_model_len=8192, tensor_parallel_size=2))
    return StoredPlan(
        planned,
        inventory=inventory.describe(),
        gpu_indices=tuple(range(2 * replicas)),
        gpu_count=8,
        inventory_origin="simulated profile 8xH100-80GB",
        gpu_name="NVIDIA H100 80GB HBM3 (simulated)",
        parsers=PARSERS,
        agents=AGENTS,
    )


def cpu_plan() -> StoredPlan:
    sizing = plan_cpu(CONFIG, LLAMA_8B_BYTES, 4.0, 8192)
    return StoredPlan(sizing, inventory="CPU (VLLM_CPU_KVCACHE_SPACE)", parsers=PARSERS, agents=AGENTS)


def through_json(plan: StoredPlan) -> dict[str, Any]:
    stored: dict[str, Any] = json.loads(json.dumps(plan.to_json()))  # as a JSONField gives it back
    return stored


@pytest.mark.parametrize("plan", [gpu_plan(), cpu_plan(), StoredPlan(None)], ids=["gpu", "cpu", "none"])
def test_a_plan_reads_back_equal_from_its_json(plan: StoredPlan) -> None:
    stored = through_json(plan)
    assert stored["version"] == PLAN_VERSION and stored["kind"] == plan.kind
    assert StoredPlan.from_json(stored) == plan
    assert StoredPlan.from_json(stored, "vllm-cpu") == plan  # a versioned plan's kind is its own, not its engine's


def test_the_json_is_the_flat_shape_the_api_has_always_answered() -> None:
    plan = gpu_plan()
    stored = through_json(plan)
    assert plan.gpu is not None
    assert {k: stored[k] for k in dataclasses.asdict(plan.gpu) if k != "gpu_indices"} == json.loads(
        json.dumps({k: v for k, v in dataclasses.asdict(plan.gpu).items() if k != "gpu_indices"})
    )
    assert stored["gpu_indices"] == [0, 1, 2, 3]  # every replica's, where the planner's result holds the first's
    assert plan.gpu.gpu_indices == [0, 1]
    assert stored["parsers"]["chosen"] == {"tool_call_parser": "llama3_json", "reasoning_parser": None}
    assert stored["agents"][0] == {"name": "Claude Code", "serves": True, "needed": 59_000, "reason": "fits"}
    tight = replace(cpu_plan(), agents=(AgentFact("Claude Code", True, 6177, "tight", 4110),))
    assert through_json(tight)["agents"][0]["room"] == 4110  # stored only where set, and read back
    assert StoredPlan.from_json(through_json(tight)).agents == tight.agents
    cpu = through_json(cpu_plan())
    assert cpu["remedies"] == [] and cpu["inventory"] == "CPU (VLLM_CPU_KVCACHE_SPACE)" and cpu["block_size"] == 128
    assert through_json(StoredPlan(None)) == {"version": 2, "kind": "none"}


def test_every_unversioned_shape_reads_with_what_it_lacked_empty() -> None:
    first_cpu = StoredPlan.from_json(FIRST_CPU)
    assert first_cpu.kind == PlanKind.CPU and first_cpu.cpu is not None and first_cpu.cpu.block_size == 128
    assert (first_cpu.inventory, first_cpu.remedies, first_cpu.parsers, first_cpu.agents) == ("", [], None, ())
    assert first_cpu.kv_capacity_tokens == 46592 and first_cpu.max_num_seqs == 0 and first_cpu.kv_cache_dtype == "auto"
    first_gpu = StoredPlan.from_json(FIRST_GPU)
    assert first_gpu.kind == PlanKind.GPU and first_gpu.split is not None
    assert first_gpu.split.graphs_in_budget == 0 and first_gpu.split.total == 85_520_809_984
    assert (first_gpu.gpu_count, first_gpu.gpu_name, first_gpu.inventory_origin) == (0, "", "")
    assert first_gpu.gpu_indices == (0, 1) and first_gpu.tensor_parallel_size == 2
    again = through_json(first_gpu)
    assert {k: again[k] for k in FIRST_GPU if k != "split"} == {k: v for k, v in FIRST_GPU.items() if k != "split"}
    assert again["split"] == {**FIRST_GPU["split"], "graphs_in_budget": 0}
    assert StoredPlan.from_json({}, "external") == StoredPlan.from_json({}) == StoredPlan(None)


def test_an_unversioned_plans_kind_is_its_engines() -> None:
    assert StoredPlan.from_json({"max_model_len": 2048}, "vllm-cpu").kind == PlanKind.CPU
    assert StoredPlan.from_json({"max_model_len": 2048}, "simulator").kind == PlanKind.GPU
    assert StoredPlan.from_json({"fits": True}, "external").kind == PlanKind.NONE
    with pytest.raises(ValueError, match=r"neither its engine nor its keys tell: \['fits'\]"):
        StoredPlan.from_json({"fits": True})


@pytest.mark.parametrize("version", [3, 99])
def test_a_newer_version_is_refused_with_what_to_do(version: int) -> None:
    with pytest.raises(PlanVersionError, match=f"plan version {version}\\); this one reads versions up to 2"):
        StoredPlan.from_json({**gpu_plan().to_json(), "version": version})


@pytest.mark.parametrize("version", ["2", True, 0, None])
def test_a_version_that_is_not_a_whole_number_from_1_is_refused(version: object) -> None:
    with pytest.raises(PlanVersionError, match="is a whole number from 1"):
        StoredPlan.from_json({"version": version, "kind": "none"})


def test_a_version_2_plan_missing_a_key_is_refused_by_name() -> None:
    stored = gpu_plan().to_json()
    del stored["inventory_origin"]
    with pytest.raises(ValueError, match="A version 2 plan lacks 'inventory_origin'"):
        StoredPlan.from_json(stored)
    with pytest.raises(ValueError, match="A version 2 plan lacks 'kind'"):
        StoredPlan.from_json({"version": 2})


def test_views_give_each_launch_its_own_plan() -> None:
    plan = gpu_plan(replicas=3)
    assert [plan.replica_gpus(slot) for slot in range(3)] == [(0, 1), (2, 3), (4, 5)]
    assert plan.as_gpu() is plan.gpu and plan.max_num_seqs == 256 and plan.cpu is None
    with pytest.raises(ValueError, match="is a gpu plan, not a CPU engine's"):
        plan.as_cpu()
    cpu = cpu_plan()
    assert cpu.as_cpu() is cpu.cpu and cpu.replica_gpus(0) == () and cpu.split is None
    with pytest.raises(ValueError, match="is a cpu plan, not a GPU engine's"):
        cpu.as_gpu()


def test_a_note_goes_first_or_last_and_the_plan_noted_is_not_changed() -> None:
    plan = cpu_plan()
    first, last = plan.noted("Held GPUs left out.", first=True), plan.noted("Remedy applied.")
    assert first.reasons[0] == "Held GPUs left out." and last.reasons[-1] == "Remedy applied."
    assert first.reasons[1:] == last.reasons[:-1] == plan.reasons
    assert "Remedy applied." not in plan.reasons
    with pytest.raises(ValueError, match="holds no reasons"):
        StoredPlan(None).noted("x")


def test_no_code_but_the_accessor_reads_the_stored_json() -> None:
    """Deployment.stored_plan is the one reader of Deployment.plan (and migrations, which see the JSON as it was):
    no module digs in a plan by key, no template reads ``dep.plan``."""
    by_key = re.compile(r"\.plan\s*(\[|\.get\(|\.items\(|\.keys\(|\.values\()")
    raw = re.compile(r"\b(dep|deployment|row|obj|self\.dep)\.plan\b")
    found = []
    for path in sorted(p for top in ("appliance", "console", "engines", "gateway") for p in (ROOT / top).rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if "/migrations/" in relative:
            continue
        text = path.read_text()
        if by_key.search(text) or (relative != "console/deployments/models.py" and raw.search(text)):
            found.append(relative)
    for path in sorted(p for top in ("console", "templates") for p in (ROOT / top).rglob("*.html")):
        if re.search(r"\b(dep|deployment)\.plan\b", path.read_text()):
            found.append(path.relative_to(ROOT).as_posix())
    assert found == []
