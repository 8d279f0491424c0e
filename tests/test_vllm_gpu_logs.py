"""The GPU planner against vLLM's own KV cache reports: published startup logs, each with its source, model,
GPU, tensor parallel size, utilization, context and vLLM version (tests/data/vllm_gpu_kv_logs.json).

The plan is made as Hearth would make it: the model's fixture config and weight bytes, the box profile of
engines/gpus.py for that GPU (NVML's MiB), the log's settings taken as given, and the vLLM release named so
the planner uses that release's accounting (engines.planner.accounting).
"""

import json
from pathlib import Path
from typing import Any

import pytest

from engines.gpus import SIM_PROFILES, simulated_inventory
from engines.modelconfig import parse_config
from engines.planner import PlanRequest, kv_bytes_per_token_per_gpu, plan_gpu
from engines.sizing import BLOCK_SIZE, GIB

DATA = Path(__file__).parent / "data"
MODELS = Path(__file__).parent.parent / "console" / "catalog" / "demo"  # the demo catalog
LOGS: list[dict[str, Any]] = json.loads((DATA / "vllm_gpu_kv_logs.json").read_text())
PLANNED = [entry for entry in LOGS if entry["plan_test"]]
TOLERANCE = 0.05
# Logs the plan misses by more than 5%, with the reason; each is held to the miss measured when it was added.
KNOWN_MISSES = {
    # vLLM's first start on this GPU left 0.9 GiB less KV cache than its next start with the same settings
    # (95,936 tokens, the entry after it, which the plan meets within 2%); the report blames the CUDA graph cache.
    "rtx5090-qwen3-8b-v0.24.0-first-start": 0.07,
}


def fixture(name: str) -> dict[str, Any]:
    return json.loads((MODELS / f"{name}.json").read_text())  # type: ignore[no-any-return]


def version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def plan_for(entry: dict[str, Any]) -> tuple[int, int, bool]:
    """(the plan's KV capacity, vLLM's, whether the plan fits) for one log."""
    model = fixture(entry["fixture"])
    config = parse_config(model["config"])
    request = PlanRequest(
        max_model_len=entry["max_model_len"],
        gpu_memory_utilization=entry["gpu_memory_utilization"],
        tensor_parallel_size=entry["tensor_parallel_size"],
        max_num_seqs=entry["max_num_seqs"],
        max_num_batched_tokens=entry["max_num_batched_tokens"],
        vllm_version=version(entry["vllm_version"]),
        enforce_eager=entry["enforce_eager"],
    )
    inventory = simulated_inventory(entry["gpu_profile"])
    plan = plan_gpu(config, model["total_size"], inventory, request, with_remedies=False)
    logged = entry["kv_cache_tokens"]
    if logged is None:  # only the KV cache's GiB was published: vLLM's own tokens from it, whole blocks
        per_token = kv_bytes_per_token_per_gpu(config, entry["tensor_parallel_size"], entry["kv_cache_dtype"])
        logged = int(entry["available_kv_cache_gib"] * GIB) // per_token // BLOCK_SIZE * BLOCK_SIZE
    return plan.kv_capacity_tokens, logged, plan.fits


def test_every_log_names_its_source_model_gpu_and_settings() -> None:
    assert len(PLANNED) >= 5
    for entry in LOGS:
        assert entry["source"] and entry["model"] and entry["gpu"], entry["id"]
        assert entry["plan_test"] or entry["why_not_planned"], entry["id"]
    for entry in PLANNED:
        assert fixture(entry["fixture"])["total_size"], entry["id"]
        assert entry["gpu_profile"] in SIM_PROFILES and version(entry["vllm_version"]) >= (0, 1), entry["id"]
        assert entry["kv_cache_tokens"] or entry["available_kv_cache_gib"], entry["id"]


@pytest.mark.parametrize("entry", PLANNED, ids=[entry["id"] for entry in PLANNED])
def test_plan_kv_capacity_is_within_5_percent_of_vllms_own_report(entry: dict[str, Any]) -> None:
    planned, logged, fits = plan_for(entry)
    error = (planned - logged) / logged
    assert abs(error) < KNOWN_MISSES.get(entry["id"], TOLERANCE), f"plan {planned:,} vs vLLM {logged:,}: {error:+.1%}"
    assert fits == (logged >= entry["max_model_len"])  # vLLM refuses a context its KV cache cannot hold


def test_known_misses_are_still_misses() -> None:
    """A miss the planner has since fixed should leave KNOWN_MISSES, so the 5% bound applies to it again."""
    for name in KNOWN_MISSES:
        planned, logged, _ = plan_for(next(entry for entry in PLANNED if entry["id"] == name))
        assert abs(planned - logged) / logged >= TOLERANCE, name
