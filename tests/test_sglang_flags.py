"""The SGLang CPU flag builder: flags from the plan, never overriding one the user set."""

import json
from pathlib import Path

import pytest

from engines.launch import EngineKind
from engines.modelconfig import parse_config
from engines.sglang import build_sglang_cpu_spec, grpc_port
from engines.sglang_launcher import API_KEY_ENV, launcher_program
from engines.sizing import plan_cpu

CONFIG = parse_config(json.loads((Path(__file__).parent / "data" / "smollm2-135m-config.json").read_text()))
PLAN = plan_cpu(CONFIG, 1, 1.0, 2048, engine=EngineKind.SGLANG_CPU)


def spec(user_args: list[str], api_key: str = "k"):  # type: ignore[no-untyped-def]
    return build_sglang_cpu_spec(
        program=launcher_program("/venv/bin/python"),
        model="/models/smol",
        served_model_name="smol",
        plan=PLAN,
        host="127.0.0.1",
        port=8001,
        api_key=api_key,
        cache_dir=Path("/cache"),
        user_args=user_args,
    )


def test_it_builds_the_flags_that_worked_on_sglang_cpu() -> None:
    s = spec([])
    assert s.engine == EngineKind.SGLANG_CPU
    assert s.argv[:2] == ["/venv/bin/python", "-c"] and "sglang.launch_server" in s.argv[2]
    assert s.args[:8] == [
        "--model-path",
        "/models/smol",
        "--served-model-name",
        "smol",
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
    ]
    assert s.env[API_KEY_ENV] == "k" and "k" not in s.args  # the launcher passes it (engines.sglang_launcher)
    assert s.added_flags == [
        "--device",
        "cpu",
        "--context-length",
        "2048",
        "--max-total-tokens",
        "46603",
        "--mem-fraction-static",
        "0.9",
        "--enable-metrics",
        "--sleep-on-idle",
        "--disable-overlap-schedule",
        "--grammar-backend",
        "llguidance",
    ]
    assert s.env["SGLANG_USE_CPU_ENGINE"] == "1" and s.env["HF_HUB_OFFLINE"] == "1"
    assert all(v.startswith("/cache/sglang/") for k, v in s.env.items() if k.endswith("_DIR"))


def test_the_kv_pool_it_asks_for_is_the_plans_capacity() -> None:
    args = spec([]).args
    assert int(args[args.index("--max-total-tokens") + 1]) == PLAN.kv_capacity_tokens == 2**30 // 23_040


def test_it_never_overrides_a_flag_the_user_set() -> None:
    s = spec(["--grammar-backend=xgrammar", "--context_length", "1024", "--max-total", "9000"])
    assert "--context-length" not in s.added_flags and "--grammar-backend" not in s.added_flags
    assert "--max-total-tokens" not in s.added_flags  # "--max-total" is argparse's abbreviation of it
    assert s.argv[-5:] == ["--grammar-backend=xgrammar", "--context_length", "1024", "--max-total", "9000"]


@pytest.mark.parametrize("flag", ["--port", "--model", "--api-key", "--host=0.0.0.0", "--served-model"])
def test_it_refuses_a_flag_hearth_owns(flag: str) -> None:
    with pytest.raises(ValueError, match="Hearth sets these itself"):
        spec([flag, "x"] if "=" not in flag else [flag])


def test_it_refuses_an_empty_api_key() -> None:
    with pytest.raises(ValueError, match="per-launch API key"):
        spec([], api_key="")


@pytest.mark.parametrize(("port", "grpc"), [(8001, 18001), (55535, 65535), (56031, 46031), (65535, 55535)])
def test_it_names_a_grpc_port_sglang_accepts_for_every_http_port(port: int, grpc: int) -> None:
    # SGLang 0.5.15.post1 refused to start on port 56031: "SGLANG_GRPC_PORT (66031) must be between 1 and 65535"
    assert grpc_port(port) == grpc
    assert spec([]).env["SGLANG_GRPC_PORT"] == "18001"
