"""The GPU planner: KV math per attention family, tensor parallel, memory split, refusals with remedies."""

from dataclasses import replace

import pytest

from engines.gpus import Inventory, simulated_inventory
from engines.modelconfig import parse_config
from engines.planner import PlanRequest, kv_bytes_per_token_per_gpu, plan_gpu
from engines.sizing import GIB, kv_bytes_per_sequence, kv_bytes_per_token

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}
LLAMA_70B = {
    **LLAMA_8B,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
}
LLAMA_8B_BYTES = 16_060_522_496  # Llama-3.1-8B-Instruct model.safetensors.index.json total_size
LLAMA_70B_BYTES = 141_107_412_992  # Llama-3.1-70B-Instruct total_size
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8"},
}


def test_mla_kv_bytes_match_the_published_deepseek_v3_figure() -> None:
    # layers × (kv_lora_rank + qk_rope_head_dim) × 2 bytes = 61 × 576 × 2 (FACTS.md)
    assert kv_bytes_per_token(parse_config(DEEPSEEK_V3)) == 70_272


def test_mla_cache_is_whole_on_every_gpu() -> None:
    config = parse_config(DEEPSEEK_V3)
    assert kv_bytes_per_token_per_gpu(config, 8, "auto") == 70_272


def test_gqa_kv_splits_over_tp_but_replicates_below_one_head_per_gpu() -> None:
    config = parse_config({**LLAMA_8B, "num_key_value_heads": 2})
    per_token = kv_bytes_per_token(config)
    assert kv_bytes_per_token_per_gpu(config, 2, "auto") == per_token // 2
    assert kv_bytes_per_token_per_gpu(config, 8, "auto") == per_token // 2  # 2 KV heads on 8 GPUs: one each


@pytest.mark.parametrize(
    ("extra", "full", "sliding", "state"),
    [
        ({"model_type": "gemma2", "sliding_window": 4096}, 16, 16, 0),
        ({"sliding_window": 1024, "sliding_window_pattern": 6}, 5, 27, 0),
        ({"sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 16}, 16, 16, 0),
        ({"model_type": "mistral", "sliding_window": 4096}, 0, 32, 0),
        ({"model_type": "qwen3", "sliding_window": 4096, "use_sliding_window": False}, 32, 0, 0),
        ({"model_type": "jamba", "attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16}, 4, 0, 28),
        ({"hybrid_override_pattern": "M-M*-" * 8, "mamba_n_heads": 64, "mamba_d_head": 64}, 8, 0, 16),
        (
            {
                "layer_types": ["linear_attention"] * 3 * 8 + ["full_attention"] * 8,
                "linear_num_value_heads": 32,
                "linear_num_key_heads": 16,
                "linear_key_head_dim": 128,
                "linear_value_head_dim": 128,
            },
            8,
            0,
            24,
        ),
    ],
    ids=[
        "gemma2",
        "gemma3-pattern",
        "gpt-oss-layer-types",
        "mistral-v0.1",
        "qwen3-no-window",
        "jamba",
        "nemotron-h",
        "qwen3-next",
    ],
)
def test_it_classifies_layers(extra: dict[str, object], full: int, sliding: int, state: int) -> None:
    mix = parse_config({**LLAMA_8B, **extra}).layers
    assert (mix.full, mix.sliding, mix.state) == (full, sliding, state)
    assert mix.state_values > 0 if state else mix.state_values == 0


def test_sliding_window_layers_hold_at_most_the_window_per_sequence() -> None:
    config = parse_config({**LLAMA_8B, "model_type": "gemma2", "sliding_window": 4096})
    half = kv_bytes_per_token(config) // 2
    assert kv_bytes_per_sequence(config, 2048) == 2 * half * 2048
    assert kv_bytes_per_sequence(config, 100_000) == half * 100_000 + half * 4096


def test_hybrid_state_is_per_sequence_not_per_token() -> None:
    config = parse_config({**LLAMA_8B, "hybrid_override_pattern": "M-M*-" * 8, "mamba_n_heads": 64, "mamba_d_head": 64})
    per_token = kv_bytes_per_token(config)
    state = kv_bytes_per_sequence(config, 0)
    assert state > 0 and kv_bytes_per_sequence(config, 1000) == state + per_token * 1000


def test_llama_8b_fits_one_h100_with_its_numbers_explained() -> None:
    plan = plan_gpu(parse_config(LLAMA_8B), LLAMA_8B_BYTES, simulated_inventory("1xH100-80GB"), PlanRequest())
    assert plan.fits and plan.tensor_parallel_size == 1 and plan.max_model_len == 131_072
    assert plan.gpu_memory_utilization == 0.90
    assert 400_000 < plan.kv_capacity_tokens < 500_000  # vLLM reports about 455k here
    assert plan.kv_capacity_tokens % 16 == 0
    split = plan.split
    assert split is not None and split.weights == LLAMA_8B_BYTES
    assert split.weights + split.activation + split.non_torch + split.kv_cache == int(split.total * 0.90)
    text = " ".join(plan.reasons)
    assert "131,072 bytes" in text and "32,768 tokens per sequence" in text


def test_llama_70b_takes_the_smallest_tensor_parallel_that_holds_a_full_sequence() -> None:
    plan = plan_gpu(
        parse_config(LLAMA_70B), LLAMA_70B_BYTES, simulated_inventory("8xH100-80GB"), PlanRequest(max_model_len=131_072)
    )
    assert plan.fits and plan.tensor_parallel_size == 4 and plan.gpu_indices == [0, 1, 2, 3]
    assert plan.kv_bytes_per_token == 327_680


def test_llama_70b_on_one_h100_does_not_fit_and_says_what_would() -> None:
    plan = plan_gpu(parse_config(LLAMA_70B), LLAMA_70B_BYTES, simulated_inventory("1xH100-80GB"), PlanRequest())
    assert not plan.fits and plan.kv_capacity_tokens == 0
    remedies = " ".join(plan.remedies)
    assert "Use an FP8 checkpoint (about 66 GiB of weights), with max_model_len 12,288 or less" in remedies
    assert "More GPUs: 4 × NVIDIA H100 80GB HBM3 at tensor parallel 4" in remedies  # 2 cannot hold 131,072 tokens


def test_a_context_too_long_for_one_gpu_is_shortened_when_not_set_and_said_so() -> None:
    plan = plan_gpu(parse_config(LLAMA_8B), LLAMA_8B_BYTES, simulated_inventory("1xRTX4090-24GB"), PlanRequest())
    assert plan.fits and plan.max_model_len < 131_072 and plan.max_model_len % 1024 == 0
    assert "does not fit one sequence, so max_model_len is" in plan.reasons[-1]


def test_an_explicit_context_too_long_is_refused_with_fp8_and_shorter_context_remedies() -> None:
    plan = plan_gpu(
        parse_config(LLAMA_8B),
        LLAMA_8B_BYTES,
        simulated_inventory("1xRTX4090-24GB"),
        PlanRequest(max_model_len=131_072),
    )
    assert not plan.fits
    assert any(r.startswith("Lower max_model_len to") for r in plan.remedies)
    assert any("FP8 KV cache" in r for r in plan.remedies)


def test_fp8_kv_halves_the_bytes_and_needs_ada_or_newer() -> None:
    config = parse_config(LLAMA_8B)
    plan = plan_gpu(config, LLAMA_8B_BYTES, simulated_inventory("1xL40S-48GB"), PlanRequest(kv_cache_dtype="fp8"))
    assert plan.kv_bytes_per_token == 65_536
    with pytest.raises(ValueError, match=r"compute capability 8\.9"):
        plan_gpu(config, LLAMA_8B_BYTES, simulated_inventory("1xA100-80GB"), PlanRequest(kv_cache_dtype="fp8"))


def test_memory_other_processes_hold_counts_as_used() -> None:
    box = simulated_inventory("1xH100-80GB")
    busy = Inventory(box.source, [replace(box.devices[0], memory_used_bytes=20 * GIB)])
    plan = plan_gpu(parse_config(LLAMA_8B), LLAMA_8B_BYTES, busy, PlanRequest())
    assert plan.gpu_memory_utilization <= (79.6 - 20) / 79.6
    assert any("Other processes already use 20.0 GiB" in r for r in plan.reasons)


def test_tensor_parallel_must_divide_the_attention_heads() -> None:
    smol = parse_config({**LLAMA_8B, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576})
    plan = plan_gpu(smol, 269_030_016, simulated_inventory("8xH100-80GB"), PlanRequest(tensor_parallel_size=2))
    assert not plan.fits
    assert plan.reasons[0] == (
        "Tensor parallel 2 does not divide the model's 9 attention heads; sizes that do on 8 GPUs: 1, 3."
    )
    big = plan_gpu(smol, 269_030_016, simulated_inventory("8xH100-80GB"), PlanRequest(tensor_parallel_size=16))
    assert big.reasons[0] == "Tensor parallel 16 needs 16 GPUs; 8 are free here."


def test_no_gpus_is_a_refusal_not_a_crash() -> None:
    plan = plan_gpu(parse_config(LLAMA_8B), LLAMA_8B_BYTES, Inventory("none"), PlanRequest())
    assert not plan.fits and plan.reasons == ["There are no GPUs in this inventory."]


def test_the_gpu_plan_refuses_a_context_beyond_the_model_too() -> None:
    plan = plan_gpu(
        parse_config(LLAMA_8B), LLAMA_8B_BYTES, simulated_inventory("1xH100-80GB"), PlanRequest(max_model_len=999_999)
    )
    assert not plan.fits and "longer than the model's own context of 131,072 tokens" in plan.reasons[0]
