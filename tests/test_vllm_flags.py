"""The vLLM CPU flag builder: flags from the plan, never overriding one the user set."""

import json
from pathlib import Path

from engines.modelconfig import parse_config
from engines.sizing import plan_cpu
from engines.vllm import API_SERVER_MODULE, build_vllm_cpu_spec

CONFIG = parse_config(json.loads((Path(__file__).parent / "data" / "smollm2-135m-config.json").read_text()))


def spec(user_args: list[str], **parsers: str):  # type: ignore[no-untyped-def]
    return build_vllm_cpu_spec(
        program=["/venv/bin/python", "-m", API_SERVER_MODULE],
        model="/models/smol",
        served_model_name="smol",
        plan=plan_cpu(CONFIG, 1, 1.0, 2048),
        host="127.0.0.1",
        port=8001,
        api_key="k",
        cache_dir=Path("/cache"),
        user_args=user_args,
        **parsers,
    )


def test_it_builds_the_flags_that_worked_on_vllm_cpu() -> None:
    s = spec([])
    assert s.argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert s.added_flags == [
        "--max-model-len",
        "2048",
        "--kv-cache-memory-bytes",
        "1073741824",
        "--dtype",
        "bfloat16",
        "--enforce-eager",
        "--enable-prompt-tokens-details",
        "--disable-uvicorn-access-log",
    ]
    assert "VLLM_CPU_KVCACHE_SPACE" not in s.env  # vLLM reads it as whole GiB and it would override the flag
    assert s.env["HF_HUB_OFFLINE"] == "1"
    assert s.env["VLLM_API_KEY"] == "k" and "k" not in s.argv  # the engine key stays out of ps
    assert s.args[:2] == ["--model", "/models/smol"] and s.port == 8001


def test_it_never_overrides_a_flag_the_user_set() -> None:
    s = spec(["--dtype=float32", "--max-model-len", "1024"])
    assert s.added_flags == [
        "--kv-cache-memory-bytes",
        "1073741824",
        "--enforce-eager",
        "--enable-prompt-tokens-details",
        "--disable-uvicorn-access-log",
    ]
    assert s.argv[-3:] == ["--dtype=float32", "--max-model-len", "1024"]
    assert "bfloat16" not in s.argv


def test_flag_names_are_read_as_vllm_reads_them() -> None:
    from engines.vllm_flags import user_flags

    assert user_flags(["--max_model_len", "4096", "-tp", "2", "--dtype=half", "-5"]).flags() == {
        "--max-model-len",
        "--tensor-parallel-size",
        "--dtype",
    }


def test_the_models_parsers_are_added_unless_the_user_set_them() -> None:
    s = spec([], tool_call_parser="hermes", reasoning_parser="qwen3")
    assert s.added_flags[-6:] == [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--reasoning-parser",
        "qwen3",
        "--disable-uvicorn-access-log",
    ]
    own = spec(["--tool-call-parser", "llama3_json"], tool_call_parser="hermes")
    assert "hermes" not in own.argv and own.argv[-2:] == ["--tool-call-parser", "llama3_json"]
    assert "--enable-auto-tool-choice" in own.added_flags


def test_a_kv_space_that_is_not_whole_gib_is_passed_in_bytes() -> None:
    s = build_vllm_cpu_spec(
        program=[],
        model="/models/smol",
        served_model_name="smol",
        plan=plan_cpu(CONFIG, 1, 0.5, 2048),
        host="127.0.0.1",
        port=8001,
        api_key="k",
        cache_dir=Path("/cache"),
    )
    flags = s.added_flags
    assert flags[flags.index("--kv-cache-memory-bytes") + 1] == str(2**29)  # VLLM_CPU_KVCACHE_SPACE=0.5 crashed vLLM
