"""vLLM and SGLang container adapters: flags from the plan, gated by engine version, never overriding
the user's.

Expected flags are the engines' own documented names: "vLLM 0.11 serve --help / docs.vllm.ai engine
args" (vllm/engine/arg_utils.py, vllm/entrypoints/openai/cli_args.py) and "SGLang 0.5 server
arguments docs" (python/sglang/srt/server_args.py); the gates' versions are cited in engines/vllm_flags.py and
engines/sglang_flags.py.
"""

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from engines.adapters import SGLANG_PROGRAM, EngineArgs, sglang_args, vllm_args
from engines.engine_version import parse_version, version_from_engine
from engines.flag_gates import gated
from engines.planner import GpuPlan
from engines.sglang_flags import SGLANG_FLAGS, SGLANG_GATES, user_flags
from engines.sglang_launcher import API_KEY_ENV
from engines.vllm_flags import VLLM_FLAGS, gpu_flags

KEY = "hk-engine-7f3a9c2e41"  # a per-launch engine key
MODEL = "meta-llama/Llama-3.1-8B-Instruct"

PLAN = GpuPlan(
    fits=True,
    tensor_parallel_size=2,
    gpu_indices=[0, 1],
    gpu_memory_utilization=0.9,
    max_model_len=32768,
    max_num_seqs=256,
    kv_cache_dtype="auto",
    weights_bytes=16_060_000_000,
    kv_bytes_per_token=131072,
    kv_capacity_tokens=500_000,
    typical_context=32768,
    concurrency_at_typical_context=15.2,
    split=None,
)
VLLM_OWN = ["--model", MODEL, "--served-model-name", "llama", "--host", "0.0.0.0", "--port", "8001"]
SGLANG_OWN = [
    *SGLANG_PROGRAM,
    "--model-path",
    MODEL,
    "--served-model-name",
    "llama",
    "--host",
    "0.0.0.0",
    "--port",
    "8001",
]
PLAN_VLLM = [
    "--tensor-parallel-size",
    "2",
    "--gpu-memory-utilization",
    "0.90",
    "--max-model-len",
    "32768",
    "--max-num-seqs",
    "256",
]
PLAN_SGLANG = [
    "--tp-size",
    "2",
    "--mem-fraction-static",
    "0.90",
    "--context-length",
    "32768",
    "--max-running-requests",
    "256",
]


def vllm(
    version: str = "0.11.2", user: list[str] | None = None, revision: str | None = None, **plan: Any
) -> EngineArgs:
    return vllm_args(
        version=version,
        model=MODEL,
        revision=revision,
        served_model_name="llama",
        port=8001,
        api_key=KEY,
        plan=replace(PLAN, **plan),
        user_args=user or [],
    )


def sglang(
    version: str = "0.5.3", user: list[str] | None = None, revision: str | None = None, **plan: Any
) -> EngineArgs:
    return sglang_args(
        version=version,
        model=MODEL,
        revision=revision,
        served_model_name="llama",
        port=8001,
        api_key=KEY,
        plan=replace(PLAN, **plan),
        user_args=user or [],
    )


Build = Callable[..., EngineArgs]

DETAILS = "--enable-prompt-tokens-details"  # vLLM 0.7.0 on: cached prompt tokens in the usage
# The log flags after the planned ones: request logging is on by default before 0.10.1 (off from there, vllm#21739);
# --disable-uvicorn-access-log is in the 0.8.2 wheel, not in 0.8.1's (vllm#14754).
LOGS_OLD = ["--disable-log-requests"]
LOGS_NEW = ["--disable-uvicorn-access-log"]
# (version, plan's KV dtype, revision) → the flags Hearth adds, from each engine's documented arguments.
VLLM_TABLE = [
    ("0.4.0", "auto", None, [*PLAN_VLLM, *LOGS_OLD]),  # vllm/engine/arg_utils.py, 0.4.0 wheel
    ("0.4.0", "fp8_e5m2", None, [*PLAN_VLLM, "--kv-cache-dtype", "fp8_e5m2", *LOGS_OLD]),  # 0.4.0: {auto,fp8_e5m2}
    ("0.4.2", "fp8", None, [*PLAN_VLLM, "--kv-cache-dtype", "fp8", *LOGS_OLD]),  # docs v0.4.2: {auto,fp8}
    ("0.4.3", "fp8_e4m3", None, [*PLAN_VLLM, "--kv-cache-dtype", "fp8_e4m3", *LOGS_OLD]),  # 0.4.3 adds the variants
    ("0.5.0", "fp8_e5m2", None, [*PLAN_VLLM, "--kv-cache-dtype", "fp8_e5m2", *LOGS_OLD]),  # docs v0.5.0 engine args
    ("0.8.1", "auto", None, [*PLAN_VLLM, DETAILS, *LOGS_OLD]),
    ("0.8.2", "auto", None, [*PLAN_VLLM, DETAILS, *LOGS_OLD, *LOGS_NEW]),
    ("0.10.0", "auto", None, [*PLAN_VLLM, DETAILS, *LOGS_OLD, *LOGS_NEW]),
    ("0.10.1", "auto", None, [*PLAN_VLLM, DETAILS, *LOGS_NEW]),
    ("0.11.2", "fp8", "5f0b02c", ["--revision", "5f0b02c", *PLAN_VLLM, "--kv-cache-dtype", "fp8", DETAILS, *LOGS_NEW]),
    ("v0.33.0", "auto", None, [*PLAN_VLLM, DETAILS, *LOGS_NEW]),
]
SGLANG_TABLE = [
    ("0.4.0", "auto", None, [*PLAN_SGLANG, "--enable-metrics"]),  # server_args.py, 0.4.0 wheel
    ("0.4.0", "fp8_e5m2", None, [*PLAN_SGLANG, "--kv-cache-dtype", "fp8_e5m2", "--enable-metrics"]),
    ("0.4.1.post6", "fp8", None, [*PLAN_SGLANG, "--kv-cache-dtype", "fp8_e4m3", "--enable-metrics"]),
    (
        "0.4.10.post2",
        "fp8_e4m3",
        "main",
        ["--revision", "main", *PLAN_SGLANG, "--kv-cache-dtype", "fp8_e4m3", "--enable-metrics"],
    ),
    ("v0.5.3rc0", "auto", None, [*PLAN_SGLANG, "--enable-metrics"]),  # SGLang 0.5 server arguments docs
]


@pytest.mark.parametrize(("version", "kv", "revision", "expected"), VLLM_TABLE)
def test_vllm_adds_the_plans_flags_its_version_takes(
    version: str, kv: str, revision: str | None, expected: list[str]
) -> None:
    args = vllm(version, revision=revision, kv_cache_dtype=kv)
    assert args.added == expected
    assert args.command == [*VLLM_OWN, *expected]
    assert args.env == {"VLLM_API_KEY": KEY}


@pytest.mark.parametrize(("version", "kv", "revision", "expected"), SGLANG_TABLE)
def test_sglang_adds_the_plans_flags_its_version_takes(
    version: str, kv: str, revision: str | None, expected: list[str]
) -> None:
    args = sglang(version, revision=revision, kv_cache_dtype=kv)
    assert args.added == expected
    assert args.command == [*SGLANG_OWN, *expected]
    assert args.env == {API_KEY_ENV: KEY}


@pytest.mark.parametrize(
    ("build", "version", "kv", "where"),
    [
        (vllm, "0.4.0", "fp8", "0.4.1 or newer"),  # 0.4.0 wheel: {auto,fp8_e5m2}
        (vllm, "0.4.2", "fp8_e4m3", "0.4.3 or newer"),  # docs v0.4.2: {auto,fp8} only
        (vllm, "0.4.1", "fp8_e5m2", "0.4.0 to before 0.4.1 and 0.4.3 or newer"),  # renamed fp8, then back
        (sglang, "0.4.1.post5", "fp8", "0.4.1.post6 or newer"),  # as fp8_e4m3; 0.4.1.post5: [auto, fp8_e5m2]
        (sglang, "0.4.0", "fp8_e4m3", "0.4.1.post6 or newer"),
    ],
)
def test_a_kv_dtype_the_version_refuses_is_an_error_not_a_silent_fp16_cache(
    build: Build, version: str, kv: str, where: str
) -> None:
    value = "fp8_e4m3" if build is sglang and kv == "fp8" else kv  # SGLang has no plain "fp8"
    with pytest.raises(ValueError, match=f"does not take --kv-cache-dtype {value}; .* takes it in {re.escape(where)}"):
        build(version, kv_cache_dtype=kv)


def test_a_kv_dtype_no_engine_takes_is_refused() -> None:
    with pytest.raises(ValueError, match="int8"):
        vllm(kv_cache_dtype="int8")
    with pytest.raises(ValueError, match="int8"):
        sglang(kv_cache_dtype="int8")


@pytest.mark.parametrize(
    ("build", "version", "floor"), [(vllm, "0.3.3", "0.4.0"), (vllm, "0.4.0rc1", "0.4.0"), (sglang, "0.3.6", "0.4.0")]
)
def test_versions_below_the_floor_are_refused(build: Build, version: str, floor: str) -> None:
    with pytest.raises(ValueError, match=f"older than the oldest .* \\({floor}\\)"):
        build(version)


@pytest.mark.parametrize("version", ["", "latest", "nightly", "main", "0.x", "1.2.3.4.5", "sglang-0.5"])
@pytest.mark.parametrize("build", [vllm, sglang])
def test_unparseable_versions_are_refused(build: Build, version: str) -> None:
    with pytest.raises(ValueError, match="engine version"):
        build(version)


# User flags and what they take from Hearth's list, in each engine's spellings: vLLM's "_" for "-",
# "-tp" (vllm/engine/arg_utils.py), --flag=value and argparse abbreviations.
VLLM_USER = [
    (["-tp", "4"], "--tensor-parallel-size"),
    (["--tensor_parallel_size=4"], "--tensor-parallel-size"),
    (["--gpu-memory-utilization=0.8"], "--gpu-memory-utilization"),
    (["--max_model_len", "4096"], "--max-model-len"),
    (["--max-model", "4096"], "--max-model-len"),  # an abbreviation argparse expands
    (["--max-num-seqs", "8"], "--max-num-seqs"),
    (["--kv-cache-dtype", "auto"], "--kv-cache-dtype"),
    (["--revision=v2"], "--revision"),
]
SGLANG_USER = [
    (["--tp-size", "4"], "--tp-size"),
    (["--tensor-parallel-size", "4"], "--tp-size"),  # server_args.py alias
    (["--tp", "4"], "--tp-size"),  # abbreviation of --tp-size
    (["--mem-fraction-static=0.8"], "--mem-fraction-static"),
    (["--context_length", "8192"], "--context-length"),
    (["--max-running-requests", "8"], "--max-running-requests"),
    (["--kv-cache-dtype", "fp8_e5m2"], "--kv-cache-dtype"),
    (["--enable-metrics"], "--enable-metrics"),
    (["--revision", "v2"], "--revision"),
]


@pytest.mark.parametrize(("user", "flag"), VLLM_USER)
def test_vllm_never_overrides_a_flag_the_user_set(user: list[str], flag: str) -> None:
    args = vllm(user=user, revision="v1", kv_cache_dtype="fp8")
    assert flag not in args.added
    assert args.command[-len(user) :] == user  # the user's flags, as given, last
    assert flag not in args.command[: -len(user)]  # and no value of Hearth's before them


@pytest.mark.parametrize(("user", "flag"), SGLANG_USER)
def test_sglang_never_overrides_a_flag_the_user_set(user: list[str], flag: str) -> None:
    args = sglang(user=user, revision="v1", kv_cache_dtype="fp8")
    assert flag not in args.added
    assert args.command[-len(user) :] == user
    assert flag not in args.command[: -len(user)]


def test_added_is_exactly_what_hearth_put_between_its_own_flags_and_the_users() -> None:
    user = ["--enable-prefix-caching", "--max-num-seqs", "64", "--trust-remote-code"]
    args = vllm(user=user)
    assert args.added == [*PLAN_VLLM[:6], DETAILS, *LOGS_NEW]
    assert args.command == [*VLLM_OWN, *args.added, *user]


def test_the_planned_flags_alone_are_what_vllm_args_adds_and_need_no_key() -> None:
    user = ["-tp", "4", "--trust-remote-code"]
    planned = gpu_flags(version="0.11.2", revision="abc123", plan=PLAN, user_args=user)
    assert planned == ["--revision", "abc123", *PLAN_VLLM[2:], DETAILS]
    assert vllm(user=user, revision="abc123").added == [*planned, *LOGS_NEW]  # and the log flags after them
    with pytest.raises(ValueError, match="Hearth sets these itself"):
        gpu_flags(version="0.11.2", revision=None, plan=PLAN, user_args=["--port", "9000"])


def test_a_users_value_is_not_read_as_a_flag() -> None:
    args = vllm(user=["--override-generation-config", "-1", "--seed", "-5"])
    assert args.added == [*PLAN_VLLM, DETAILS, *LOGS_NEW]


@pytest.mark.parametrize(
    ("build", "user", "owned"),
    [
        (vllm, ["--port", "9000"], "--port"),
        (vllm, ["--model=other/model"], "--model"),
        (vllm, ["--served_model_name", "x"], "--served-model-name"),
        (vllm, ["--api-key", "mine"], "--api-key"),  # would take precedence over VLLM_API_KEY
        (vllm, ["--host", "127.0.0.1"], "--host"),
        (vllm, ["--uds", "/tmp/vllm.sock"], "--uds"),
        (sglang, ["--model", "other/model"], "--model-path"),  # alias of --model-path
        (sglang, ["--api_key=mine"], "--api-key"),
        (sglang, ["--port=9000"], "--port"),
    ],
)
def test_flags_the_gateway_relies_on_are_refused_not_replaced(build: Build, user: list[str], owned: str) -> None:
    with pytest.raises(ValueError, match=f"{owned}.*Hearth sets"):
        build(user=user)


def test_the_vllm_api_key_travels_in_the_environment_never_in_argv() -> None:
    args = vllm(user=["--trust-remote-code"], revision="v1", kv_cache_dtype="fp8")
    assert args.env["VLLM_API_KEY"] == KEY
    assert not any(KEY in arg for arg in args.command)
    assert "--api-key" not in args.command
    assert KEY not in repr(args)


def test_sglang_takes_the_key_from_the_environment_through_the_launcher_and_its_repr_hides_it() -> None:
    args = sglang()
    assert args.env[API_KEY_ENV] == KEY and not any(KEY in arg for arg in args.command)
    assert KEY not in repr(args)


def test_sglang_turns_on_its_metrics_and_vllm_needs_no_flag_for_them() -> None:
    assert sglang("0.5.3").added[-1] == "--enable-metrics"  # SGLang's /metrics is off without it
    assert "--enable-metrics" not in vllm("0.11.2").command  # vLLM serves /metrics by default


def test_below_a_gate_an_optional_flag_is_left_out_and_a_required_one_refused() -> None:
    # Every supported SGLang (0.4.0+) has --enable-metrics (0.3.5.post1+): the gate itself, on 0.3.5.
    wanted = [("--enable-metrics", None, False)]
    nothing = user_flags([])
    assert gated("SGLang", "0.3.5", wanted, SGLANG_GATES, nothing) == []
    assert gated("SGLang", "0.3.5.post1", wanted, SGLANG_GATES, nothing) == ["--enable-metrics"]
    with pytest.raises(ValueError, match=r"takes it in 0\.4\.0 or newer"):
        gated("SGLang", "0.3.6", [("--revision", "v1", True)], SGLANG_GATES, nothing)


def test_a_user_who_wants_the_access_log_keeps_it() -> None:
    args = vllm(user=["--no-disable-uvicorn-access-log"])  # BooleanOptionalAction in current vLLM: the last wins
    assert args.command[-1] == "--no-disable-uvicorn-access-log"
    assert "--disable-uvicorn-access-log" not in vllm(user=["--disable-uvicorn-access-log"]).added


def test_trust_remote_code_is_never_added_only_passed_through() -> None:
    for args in (vllm(), sglang(), vllm(kv_cache_dtype="fp8"), sglang(revision="v1")):
        assert "--trust-remote-code" not in args.command
    assert vllm(user=["--trust-remote-code"]).command[-1] == "--trust-remote-code"
    assert sglang(user=["--trust-remote-code"]).command[-1] == "--trust-remote-code"


def test_every_emitted_flag_is_one_checked_in_the_engines_parser() -> None:
    for args, known in (
        (vllm("0.11.2", revision="v1", kv_cache_dtype="fp8"), VLLM_FLAGS),
        (sglang("0.5.3", revision="v1", kv_cache_dtype="fp8"), SGLANG_FLAGS),
    ):
        flags = {arg for arg in args.command if arg.startswith("--")}
        assert flags <= known, flags - known
    assert len({arg for arg in vllm(revision="v1", kv_cache_dtype="fp8").command if arg.startswith("--")}) == 12
    # SGLang's key goes by the launcher (engines.sglang_launcher), not as a flag
    assert len({arg for arg in sglang(revision="v1", kv_cache_dtype="fp8").command if arg.startswith("--")}) == 11


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"fits": False, "reasons": ["Does not fit: one 32,768-token sequence needs more KV cache."]}, "Does not fit"),
        ({"tensor_parallel_size": 0}, "does not fit"),
    ],
)
def test_a_plan_that_does_not_fit_is_not_launched(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        vllm(**change)
    with pytest.raises(ValueError, match=message):
        sglang(**change)


def test_an_empty_key_bad_port_or_missing_name_is_refused() -> None:
    with pytest.raises(ValueError, match="API key"):
        vllm_args(
            version="0.11.2", model=MODEL, revision=None, served_model_name="llama", port=8001, api_key="", plan=PLAN
        )
    with pytest.raises(ValueError, match="API key"):
        sglang_args(
            version="0.5.3", model=MODEL, revision=None, served_model_name="llama", port=8001, api_key="", plan=PLAN
        )
    with pytest.raises(ValueError, match="TCP port"):
        vllm_args(
            version="0.11.2", model=MODEL, revision=None, served_model_name="llama", port=0, api_key=KEY, plan=PLAN
        )
    with pytest.raises(ValueError, match="served model name"):
        sglang_args(
            version="0.5.3", model=MODEL, revision=None, served_model_name="", port=8001, api_key=KEY, plan=PLAN
        )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("0.11.2", (0, 11, 2, 0, 0, 0, 0, 0, 0)),
        ("v0.11.2", (0, 11, 2, 0, 0, 0, 0, 0, 0)),
        (" 0.11.2+cu128 ", (0, 11, 2, 0, 0, 0, 0, 0, 0)),  # a local build tag is ignored
        ("0.4", (0, 4, 0, 0, 0, 0, 0, 0, 0)),
        ("0.5.3rc0", (0, 5, 3, 0, -1, 0, 0, 0, 0)),
        ("0.4.10.post2", (0, 4, 10, 0, 0, 0, 3, 0, 0)),
        ("0.11.1.dev5+g1a2b3c", (0, 11, 1, 0, -4, 0, 0, -1, 5)),
        ("0.1.dev3820+g27244b2.d20241225", (0, 1, 0, 0, -4, 0, 0, -1, 3820)),  # a vLLM source build
    ],
)
def test_versions_parse_to_sort_keys(text: str, key: tuple[int, ...]) -> None:
    assert parse_version(text) == key


def test_version_keys_sort_as_releases_do() -> None:
    order = [
        "0.4.1.post5",
        "0.4.1.post6",
        "0.4.2",
        "0.5.3rc0",
        "0.5.3",
        "0.5.3.post1",
        "0.5.4",
        "0.11.1.dev5",
        "0.11.1rc1",
        "0.11.1",
        "0.11.2",
        "0.33.0",
    ]
    assert sorted(order, key=parse_version) == order
    assert parse_version("0.4") == parse_version("0.4.0") == parse_version("v0.4.0")


@pytest.mark.parametrize("text", ["", "   ", "latest", "0.x", "1.2.3.4.5", "0.5.3-foo", "vv0.1"])
def test_unparseable_versions_raise(text: str) -> None:
    with pytest.raises(ValueError, match="Not an engine version"):
        parse_version(text)


# Bodies as the engines answer: vLLM GET /version; SGLang GET /get_server_info (0.4.0+) and
# /server_info (0.5.6+), the server arguments with a top-level "version" (entrypoints/http_server.py).
SGLANG_SERVER_INFO = {
    "model_path": MODEL,
    "tp_size": 2,
    "api_key": KEY,
    "max_total_num_tokens": 500_000,
    "internal_states": [{"avg_spec_accept_length": None}],
    "version": "0.4.10.post2",
}


@pytest.mark.parametrize(
    ("engine", "body", "version"),
    [
        ("vllm", {"version": "0.11.2"}, "0.11.2"),
        ("vllm-cpu", {"version": "0.32.0"}, "0.32.0"),
        ("sglang", SGLANG_SERVER_INFO, "0.4.10.post2"),
        ("sglang", {**SGLANG_SERVER_INFO, "version": "0.5.6", "frontend": "python"}, "0.5.6"),
        ("sglang-cpu", {**SGLANG_SERVER_INFO, "version": "0.5.15.post1"}, "0.5.15.post1"),  # seen on CPU here
    ],
)
def test_version_from_engine_reads_each_engines_answer(engine: str, body: dict[str, object], version: str) -> None:
    assert version_from_engine(engine, body) == version


@pytest.mark.parametrize(
    ("engine", "body", "message"),
    [
        ("vllm", {}, "no version"),
        ("vllm", {"version": 11}, "no version"),
        ("sglang", {k: v for k, v in SGLANG_SERVER_INFO.items() if k != "version"}, "no version"),
        ("sglang", {"version": "unknown"}, "Not an engine version"),
        ("tgi", {"version": "3.0.0"}, "No version reader"),
    ],
)
def test_version_from_engine_refuses_what_it_cannot_read(engine: str, body: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        version_from_engine(engine, body)


TOOLS, THINK = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"], ["--reasoning-parser", "qwen3"]
# version → the parser flags a Qwen3 model gets (hermes, qwen3), as the wheels named in engines.vllm_flags show.
VLLM_PARSER_TABLE = [
    ("0.5.5", []),  # no tool calling in the parser yet
    ("0.6.0", TOOLS),
    ("0.7.0", TOOLS),  # no --reasoning-parser yet
    ("0.7.1", [*TOOLS, *THINK, "--enable-reasoning"]),  # the parser needed --enable-reasoning beside it
    ("0.8.5", [*TOOLS, *THINK, "--enable-reasoning"]),
    ("0.9.0", [*TOOLS, *THINK]),  # --enable-reasoning deprecated
    ("0.32.0", [*TOOLS, *THINK]),
]


@pytest.mark.parametrize(("version", "expected"), VLLM_PARSER_TABLE)
def test_vllm_gets_the_parser_flags_its_version_takes(version: str, expected: list[str]) -> None:
    args = vllm_args(
        version=version,
        model=MODEL,
        revision=None,
        served_model_name="llama",
        port=8001,
        api_key=KEY,
        plan=PLAN,
        tool_call_parser="hermes",
        reasoning_parser="qwen3",
    )
    assert args.added[: len(PLAN_VLLM)] == PLAN_VLLM
    assert [a for a in args.added[len(PLAN_VLLM) :] if a not in (DETAILS, *LOGS_OLD, *LOGS_NEW)] == expected


@pytest.mark.parametrize(
    ("version", "expected"),
    [("0.4.1", []), ("0.4.2", ["--tool-call-parser", "qwen25"]), ("0.4.4", ["--tool-call-parser", "qwen25", *THINK])],
)
def test_sglang_gets_the_parser_flags_its_version_takes(version: str, expected: list[str]) -> None:
    args = sglang_args(
        version=version,
        model=MODEL,
        revision=None,
        served_model_name="llama",
        port=8001,
        api_key=KEY,
        plan=PLAN,
        tool_call_parser="qwen25",
        reasoning_parser="qwen3",
    )
    assert args.added[args.added.index("--enable-metrics") + 1 :] == expected


def test_a_users_parser_flags_are_never_overridden() -> None:
    user = ["--tool-call-parser=mistral", "--enable-reasoning"]
    args = vllm_args(
        version="0.8.5",
        model=MODEL,
        revision=None,
        served_model_name="llama",
        port=8001,
        api_key=KEY,
        plan=PLAN,
        user_args=user,
        tool_call_parser="hermes",
        reasoning_parser="qwen3",
    )
    assert "hermes" not in args.command and args.command.count("--enable-reasoning") == 1
    assert args.command[-2:] == user and "--enable-auto-tool-choice" in args.added
