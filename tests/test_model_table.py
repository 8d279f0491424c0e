"""Sizing against real published model configurations: the demo catalog (console/catalog/demo), each file citing
its source.

KV bytes per token per family, with the formula's source:
- GQA/MHA (Llama, Qwen, Mistral, Mixtral, Phi, Gemma, gpt-oss): 2 x layers x kv_heads x head_dim x bytes
  (the K and V tensors vLLM allocates per layer, vllm/v1/kv_cache_interface.py FullAttentionSpec);
  explicit ``head_dim`` wins (Qwen3, Gemma);
- MLA (DeepSeek-V3, Kimi K2): layers x (kv_lora_rank + qk_rope_head_dim) x bytes (MLAAttentionSpec: one
  latent vector per token, DeepSeek-V2 paper section 2.1.2);
- hybrids (Nemotron-H, Qwen3-Next): only the attention layers keep per-token KV.
"""

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from engines.gpus import GpuDevice, Inventory
from engines.modelconfig import parse_config
from engines.planner import PlanRequest, kv_bytes_per_token_per_gpu, plan_gpu
from engines.sizing import GIB, kv_bytes_per_token

MODELS = Path(__file__).parent.parent / "console" / "catalog" / "demo"

# file: (KV bytes per token, bf16/fp16 cache; weight bytes; quant_method). Weight bytes are the fixture's
# total_size, whose total_size_kind says where it came from: "index" (model.safetensors.index.json's
# metadata.total_size as published), "safetensors-header" (tensor bytes summed from the shard headers),
# "derived-from-parameter-count" (published exact parameter counts per dtype x that dtype's bytes; for all-BF16
# checkpoints, the count x 2), "same-tensors-as" (another checkpoint's published bytes, same shapes and dtypes),
# "derived-from-config" (bytes from config.json's shapes in a layout that reproduces published figures of sibling
# checkpoints: per-dtype counts for the FP8 ones, byte totals for AWQ) or "derived-from-config-unconfirmed" (the
# GPTQ checkpoint: AutoGPTQ's tensor layout, which no published GPTQ figure could be found to check). Each
# fixture's total_size_source cites its sources and what else was searched. DeepSeek-V3's index total_size
# (1,369,062,772,000) counts every element at 2 bytes and is not its FP8 checkpoint's size.
# nvidia/Nemotron-H-56B-Base-8K was dropped: no published index, header sum or parameter count for it was found;
# Nemotron-3-Nano (nemotron_h) and Qwen3-Next keep the hybrids covered.
TABLE: dict[str, tuple[int, int, str]] = {
    "llama-3.1-8b": (2 * 32 * 8 * 128 * 2, 16_060_522_496, ""),
    "llama-3.1-8b-instruct": (131_072, 16_060_522_496, ""),
    "llama-3.1-70b": (327_680, 141_107_412_992, ""),  # FACTS.md's reference value
    "llama-3.3-70b-instruct": (327_680, 141_107_412_992, ""),  # derived: 70,553,706,496 params x 2
    "llama-3.1-70b-instruct-fp8": (327_680, 72_656_376_192, ""),  # FP8 in hf_quant_config.json, not config.json
    "llama-3.1-405b": (2 * 126 * 8 * 128 * 2, 811_706_777_600, ""),  # derived: 405,853,388,800 params x 2
    "qwen3-0.6b": (2 * 28 * 8 * 128 * 2, 1_503_264_768, ""),  # safetensors header (single file)
    "qwen3-8b": (2 * 36 * 8 * 128 * 2, 16_381_470_720, ""),
    "qwen3-32b": (2 * 64 * 8 * 128 * 2, 65_524_246_528, ""),
    "qwen3-32b-fp8": (262_144, 34_322_434_048, "fp8"),  # BF16 x 2 + F8_E4M3 x 1 (HF API counts)
    "qwen3-30b-a3b": (2 * 48 * 4 * 128 * 2, 61_064_245_248, ""),
    "qwen3-30b-a3b-fp8": (98_304, 31_170_895_872, "fp8"),
    "qwen3-235b-a22b": (2 * 94 * 4 * 128 * 2, 470_187_269_120, ""),
    "qwen3-235b-a22b-fp8": (192_512, 236_416_915_456, "fp8"),  # derived from config, count checked
    "mistral-7b-v0.1": (2 * 32 * 8 * 128 * 2, 14_483_464_192, ""),
    "mixtral-8x7b-v0.1": (131_072, 93_405_585_408, ""),
    "gemma-2-9b-it": (2 * 42 * 8 * 256 * 2, 18_483_411_968, ""),
    "gemma-3-27b-it": (2 * 62 * 16 * 128 * 2, 54_864_813_280, ""),  # nested text_config; derived: params x 2
    "phi-4-mini-instruct": (2 * 32 * 8 * 128 * 2, 7_672_043_520, ""),  # derived: 3,836,021,760 params x 2
    "deepseek-v3": (61 * (512 + 64) * 2, 688_574_839_360, "fp8"),  # FACTS.md: 70,272; BF16 x 2 + F8 + F32 x 4
    "kimi-k2-instruct": (61 * (512 + 64) * 2, 1_029_173_256_720, "fp8"),  # safetensors headers (61 files)
    "gpt-oss-20b": (2 * 24 * 8 * 64 * 2, 13_761_264_768, "mxfp4"),
    "gpt-oss-120b": (2 * 36 * 8 * 64 * 2, 65_248_815_744, "mxfp4"),  # safetensors headers (15 files)
    "llama-2-7b-awq": (2 * 32 * 32 * 128 * 2, 3_889_307_648, "awq"),  # AWQ layout, checked on 2 published sums
    "llama-2-7b-gptq-pacemaker": (524_288, 3_893_862_400, "gptq"),  # AutoGPTQ layout, unconfirmed
    "qwen2.5-72b-instruct-ko-awq": (2 * 80 * 8 * 128 * 2, 41_464_774_656, "awq"),
    "nemotron-3-nano-30b-a3b-bf16": (2 * 6 * 2 * 128 * 2, 63_155_886_464, ""),
    "qwen3-next-80b-a3b-thinking": (2 * 12 * 2 * 256 * 2, 162_649_725_440, ""),  # every 4th of 48 layers: attention
    "smollm2-135m": (23_040, 269_030_016, ""),  # safetensors header (single file)
}


def fixture(name: str) -> dict[str, object]:
    return json.loads((MODELS / f"{name}.json").read_text())  # type: ignore[no-any-return]


def test_the_table_covers_every_fixture_and_at_least_25_models() -> None:
    files = {p.stem for p in MODELS.glob("*.json")}
    assert files == set(TABLE) and len(TABLE) >= 25


@pytest.mark.parametrize("name", sorted(TABLE))
def test_kv_bytes_and_quantization_per_model(name: str) -> None:
    kv, _, quant = TABLE[name]
    config = parse_config(fixture(name)["config"])  # type: ignore[arg-type]
    assert (config.quantization, kv_bytes_per_token(config)) == (quant, kv)


WEIGHT_KINDS = {
    "index",
    "safetensors-header",
    "derived-from-parameter-count",
    "same-tensors-as",
    "derived-from-config",
    "derived-from-config-unconfirmed",
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_every_weight_figure_is_the_fixtures_and_says_where_it_came_from(name: str) -> None:
    data = fixture(name)
    assert data["total_size"] == TABLE[name][1] and data["total_size_source"]
    assert data.get("total_size_kind") in WEIGHT_KINDS


@pytest.mark.parametrize("name", sorted(TABLE))
def test_manage_py_plan_reports_the_checkpoint_bytes_and_kv(name: str) -> None:
    out = io.StringIO()
    call_command("plan", str(MODELS / f"{name}.json"), "--gpus", "8xH200-141GB", "--json", stdout=out)
    plan = json.loads(out.getvalue())
    assert (plan["weights_bytes"], plan["kv_bytes_per_token"]) == (TABLE[name][1], TABLE[name][0])
    assert plan["fits"] and set(plan) >= {
        "kv_capacity_tokens",
        "tensor_parallel_size",
        "gpu_memory_utilization",
        "max_model_len",
        "max_num_seqs",
        "reasons",
    }


RTX_3090 = GpuDevice(0, "NVIDIA GeForce RTX 3090", "GPU-3090", int(23.58 * GIB), 0, (8, 6))


@pytest.mark.parametrize(("max_model_len", "vllm_tokens"), [(20_000, 1952 * 16), (29_000, 1478 * 16)])
def test_llama_8b_on_a_3090_is_within_5_percent_of_vllms_own_kv_cache(max_model_len: int, vllm_tokens: int) -> None:
    # vllm#10517 (tests/data/vllm_gpu_kv_logs.json): vLLM V0, which profiled one max_model_len-token forward
    # pass, gpu_memory_utilization 0.90, 23.58 GiB total as CUDA reports it; the planner's version-less estimate.
    # tests/test_vllm_gpu_logs.py plans the same logs from the box profile with V0's accounting.
    config = parse_config(fixture("llama-3.1-8b-instruct")["config"])  # type: ignore[arg-type]
    request = PlanRequest(
        max_model_len=max_model_len, gpu_memory_utilization=0.90, max_num_batched_tokens=max_model_len
    )
    plan = plan_gpu(config, 16_060_522_496, Inventory("nvml", [RTX_3090]), request)
    assert plan.fits == (max_model_len <= vllm_tokens)  # vLLM refuses a max_model_len its KV cache cannot hold
    assert abs(plan.kv_capacity_tokens - vllm_tokens) / vllm_tokens < 0.05, plan.kv_capacity_tokens


def test_qwen3_235b_fp8_kv_per_gpu_at_tp4_matches_vllm() -> None:
    # vllm#21348: "Available KV cache memory: 8.11 GiB / GPU KV cache size: 178,880 tokens" at TP 4.
    config = parse_config(fixture("qwen3-235b-a22b-fp8")["config"])  # type: ignore[arg-type]
    tokens = int(8.11 * GIB) // kv_bytes_per_token_per_gpu(config, 4, "auto")
    assert abs(tokens - 178_880) / 178_880 < 0.05


@pytest.mark.parametrize("name", sorted(TABLE))
def test_every_model_has_a_context(name: str) -> None:
    """The demo catalog's Context column: a sparse config (Gemma 3's nested text_config leaves
    max_position_embeddings to transformers' default) still has one."""
    assert parse_config(fixture(name)["config"]).max_position_embeddings > 0  # type: ignore[arg-type]


def test_gemma_3s_context_is_its_classs_default() -> None:
    assert parse_config(fixture("gemma-3-27b-it")["config"]).max_position_embeddings == 131_072  # type: ignore[arg-type]
