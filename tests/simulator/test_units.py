"""The simulator's pure parts: flags, tokenizer, faults, prefix cache, schema-shaped tool arguments."""

import pytest

from engines.simulator import textgen, tokenizer
from engines.simulator.common import APIError, check_sampling
from engines.simulator.config import parse_config
from engines.simulator.faults import FaultError, parse_faults


def test_hearths_simulator_launch_flags_parse_without_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--model", "org/m", "--served-model-name", "m", "--host", "0.0.0.0", "--port", "9000", "--api-key", "k"]
    argv += ["--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.90", "--max-model-len", "8192"]
    argv += ["--max-num-seqs", "64", "--kv-cache-tokens", "100000", "--kv-cache-dtype", "fp8"]
    cfg = parse_config(argv)
    assert (cfg.served_model_name, cfg.port, cfg.api_key, cfg.max_model_len) == ("m", 9000, "k", 8192)
    assert (cfg.kv_cache_tokens, cfg.num_blocks, cfg.kv_cache_dtype) == (100000, 6250, "fp8")
    assert capsys.readouterr().err == ""


def test_unknown_flags_are_ignored_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = parse_config(["--new-flag", "x", "--max-model-len", "128", "--switch"])
    assert cfg.max_model_len == 128
    assert "ignoring unknown arguments: --new-flag x --switch" in capsys.readouterr().err


def test_tokens_join_back_to_the_text() -> None:
    text = "<|im_start|>user\nHello,  world!\n<|im_end|>\n  "
    assert "".join(tokenizer.pieces(text)) == text
    assert tokenizer.encode(text)[0] == tokenizer.SPECIAL_TOKENS["<|im_start|>"]
    assert tokenizer.encode("same words") == tokenizer.encode("same words")


def test_faults_come_from_the_header_and_from_markers() -> None:
    faults = parse_faults("stall-first=1.5, drop-mid-stream", "hi [[sim:error-500]] [[sim:die-mid-stream=7]]")
    assert (faults.stall_first, faults.drop_after, faults.die_after, faults.error_500) == (1.5, 3, 7, True)
    assert parse_faults(None, "no markers") == parse_faults("", "")
    for bad in ("explode", "stall-first", "stall-between=soon", "stall-first=-1"):
        with pytest.raises(FaultError):
            parse_faults(bad, "")


def test_tool_arguments_follow_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "when": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
            "deep": {"properties": {"ok": {"type": ["null", "boolean"]}}},
        },
    }
    assert textgen.example_value(schema) == {"city": "sim city", "when": 7, "tags": ["a"], "deep": {"ok": True}}
    call = textgen.plan_tool_call("f", schema, max_tokens=3, id_prefix="toolu_")
    assert call.finish == "length" and len(call.pieces) == 3


def test_text_is_deterministic_per_seed_and_index() -> None:
    def plan(seed: int, index: int) -> str:
        return textgen.plan_text("p", seed=seed, index=index, max_tokens=50, natural=20).text

    assert plan(1, 0) == plan(1, 0)
    assert plan(1, 0) != plan(2, 0) and plan(1, 0) != plan(1, 1)
    assert textgen.plan_text("p", seed=1, index=0, max_tokens=5, natural=20, ignore_eos=True).finish == "length"


def test_flags_are_read_as_vllm_reads_them() -> None:
    config = parse_config(["--max_model_len", "2048", "-tp", "2", "--max-num-seqs=8"])
    assert (config.max_model_len, config.max_num_seqs) == (2048, 8)


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        (
            {"temperature": "hot"},
            "'loc': 'body.temperature', 'msg': 'Input should be a valid number",
            "body.temperature",
        ),
        (
            {"temperature": float("nan")},
            "temperature must be a finite number, got nan. (parameter=temperature",
            "temperature",
        ),
        ({"top_p": 1.5}, "top_p must be in (0, 1], got 1.5. (parameter=top_p, value=1.5)", "top_p"),
        ({"frequency_penalty": -3}, "frequency_penalty must be in [-2, 2], got -3.0.", None),
    ],
)
def test_a_sampling_field_not_a_number_in_its_range_is_refused_in_vllms_words(
    body: dict[str, object], message: str, param: str | None
) -> None:
    with pytest.raises(APIError) as caught:
        check_sampling(body)
    assert caught.value.status == 400 and message in caught.value.message and caught.value.param == param


def test_sampling_fields_in_range_or_absent_pass_and_a_boolean_is_a_number_as_to_pydantic() -> None:
    check_sampling({"temperature": 0, "top_p": 1, "presence_penalty": -2, "frequency_penalty": 2.0})
    check_sampling({"temperature": None})
    check_sampling({"temperature": True})  # vLLM 0.32 answers it, at 1.0
