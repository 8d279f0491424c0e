"""Sizing, first cut: KV bytes per token and KV capacity, checked against the numbers vLLM reports."""

import json
from pathlib import Path

import pytest

from engines.launch import EngineKind
from engines.modelconfig import ModelConfigError, parse_config
from engines.sizing import GIB, kv_bytes_per_token, plan_cpu

DATA = Path(__file__).parent / "data"
SMOLLM2 = parse_config(json.loads((DATA / "smollm2-135m-config.json").read_text()))
SMOLLM2_WEIGHTS = 269_030_016  # bytes of BF16 tensors in the converted checkpoint


def test_it_computes_smollm2_kv_bytes_per_token() -> None:
    # 2 × 30 layers × 3 KV heads × head_dim 64 × 2 bytes (bf16), as measured in the project's FACTS.md
    assert kv_bytes_per_token(SMOLLM2) == 23_040


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # Llama 3 70B: 80 layers, 8 KV heads, head_dim 128 (hidden 8192 / 64 heads), bf16
        (
            {
                "num_hidden_layers": 80,
                "num_attention_heads": 64,
                "num_key_value_heads": 8,
                "hidden_size": 8192,
                "torch_dtype": "bfloat16",
            },
            327_680,
        ),
        # Qwen3-4B: explicit head_dim 128 wins over hidden_size / heads (2560 / 32 = 80)
        (
            {
                "num_hidden_layers": 36,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "hidden_size": 2560,
                "head_dim": 128,
                "torch_dtype": "bfloat16",
            },
            147_456,
        ),
    ],
    ids=["llama-3-70b", "qwen3-4b"],
)
def test_it_matches_published_kv_bytes(config: dict[str, object], expected: int) -> None:
    assert kv_bytes_per_token(parse_config(config)) == expected


def test_it_halves_kv_bytes_for_fp8() -> None:
    assert kv_bytes_per_token(SMOLLM2, "fp8") == 23_040 // 2


def test_it_reads_a_multimodal_models_text_config() -> None:
    raw = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": {
            "num_hidden_layers": 34,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "hidden_size": 2560,
            "head_dim": 256,
        },
    }
    assert parse_config(raw).num_hidden_layers == 34


def test_it_names_the_missing_config_field() -> None:
    with pytest.raises(ModelConfigError, match="num_hidden_layers"):
        parse_config({"num_attention_heads": 9, "hidden_size": 576})


@pytest.mark.parametrize(("gib", "tokens"), [(1, 46_592), (2, 93_184), (0.5, 23_296)])
def test_it_plans_the_kv_capacity_vllm_cpu_reports(gib: float, tokens: int) -> None:
    plan = plan_cpu(SMOLLM2, SMOLLM2_WEIGHTS, gib, 2048)
    assert plan.kv_capacity_tokens == tokens
    assert plan.kv_capacity_tokens % plan.block_size == 0
    assert plan.fits


@pytest.mark.parametrize(("gib", "tokens"), [(1, 46_603), (0.5, 23_301)])
def test_it_plans_the_kv_pool_sglang_cpu_holds_in_pages_of_one_token(gib: float, tokens: int) -> None:
    # 2^30 // 23,040 = 46,603: SGLang 0.5.15.post1 given it as --max-total-tokens logged
    # "max_total_num_tokens=46603" (scripts/sglang-cpu.md); vLLM's 128-token blocks hold 46,592.
    plan = plan_cpu(SMOLLM2, SMOLLM2_WEIGHTS, gib, 2048, engine=EngineKind.SGLANG_CPU)
    assert (plan.kv_capacity_tokens, plan.block_size, plan.fits) == (tokens, 1, True)
    assert "(as --max-total-tokens)" in plan.reasons[2] and "blocks" not in plan.reasons[2]


def test_a_gpu_engine_has_no_cpu_plan() -> None:
    with pytest.raises(KeyError):
        plan_cpu(SMOLLM2, SMOLLM2_WEIGHTS, 1, 2048, engine=EngineKind.SGLANG)


def test_it_states_the_numbers_in_words() -> None:
    plan = plan_cpu(SMOLLM2, SMOLLM2_WEIGHTS, 1, 2048)
    text = " ".join(plan.reasons)
    assert "23,040 bytes" in text and "46,592 tokens" in text and "22.75 concurrent" in text
    assert plan.max_concurrency == 22.75  # vLLM: "Maximum concurrency for 2,048 tokens per request: 22.75x"


def test_it_refuses_a_context_the_kv_cache_cannot_hold_and_says_what_would_fit() -> None:
    plan = plan_cpu(SMOLLM2, SMOLLM2_WEIGHTS, 0.01, 8192)
    assert not plan.fits
    assert "Lower max_model_len to 384 or below" in plan.reasons[-1]


def test_it_uses_the_models_own_context_when_max_model_len_is_zero() -> None:
    assert plan_cpu(SMOLLM2, SMOLLM2_WEIGHTS, 1, 0).max_model_len == 8192


def test_gib_is_binary() -> None:
    assert GIB == 2**30


def test_it_refuses_a_kv_space_the_host_cannot_hold() -> None:
    plan = plan_cpu(SMOLLM2, SMOLLM2_WEIGHTS, 100_000, 2048, host_memory_bytes=24 * GIB)
    assert not plan.fits and "exceed this host's 24.0 GiB of memory. Lower the KV space to 20.7 GiB" in plan.reasons[-1]


def test_a_kv_space_below_one_block_says_so_rather_than_suggesting_zero() -> None:
    plan = plan_cpu(SMOLLM2, SMOLLM2_WEIGHTS, 0.001, 2048)
    assert not plan.fits and "holds not one block of 128 tokens. Raise the KV space to 1 GiB" in plan.reasons[-1]


def test_a_context_longer_than_the_model_takes_is_refused_as_vllm_would() -> None:
    plan = plan_cpu(SMOLLM2, SMOLLM2_WEIGHTS, 4, 20_000)
    assert not plan.fits and "longer than the model's own context of 8,192 tokens" in plan.reasons[-1]
