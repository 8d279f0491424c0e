"""The real SGLang CPU engine (PyPI sglang 0.5.15.post1, built by scripts/setup-sglang-cpu.sh) under
Hearth's launch specs: SGLang's own argument parser, from the installed package, takes the flags Hearth
builds; the process runtime starts it serving SmolLM2-135M-Instruct; the openai SDK streams from it; its
/metrics maps to the canonical names with the plan's KV capacity; stopping it leaves no process.
"""

import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import httpx
import openai
import pytest
from django.conf import settings
from openai.types.chat import ChatCompletionFunctionToolParam

from appliance.runtimes.process import ProcessRuntime, engine_port
from engines.adapters import sglang_args
from engines.launch import EngineKind
from engines.metric_mappings import DEFAULT_MAPPINGS
from engines.metrics import choose_flavor, parse_metrics, sample_names
from engines.modelconfig import parse_config
from engines.planner import GpuPlan
from engines.sglang import build_sglang_cpu_spec
from engines.sglang_launcher import API_KEY_ENV, launcher_program
from engines.sizing import plan_cpu
from tests.conftest import ENGINE_READY_WITHIN, free_port

pytestmark = pytest.mark.engine

PYTHON = Path(settings.HEARTH_SGLANG_CPU_PYTHON)
MODEL_DIR = Path(os.environ.get("HEARTH_SMOLLM2_DIR", settings.HEARTH_CACHE_DIR / "models/SmolLM2-135M-Instruct"))
CONFIG = parse_config(json.loads((Path(__file__).parent / "data" / "smollm2-135m-config.json").read_text()))
READY_WITHIN = ENGINE_READY_WITHIN
# Parses argv with the installed SGLang's own parser (ServerArgs.add_cli_args) and prints what it read.
PARSE = (
    "import argparse, json, sys\n"
    "from sglang.srt.server_args import ServerArgs\n"
    "parser = argparse.ArgumentParser()\n"
    "ServerArgs.add_cli_args(parser)\n"
    "print(json.dumps(vars(parser.parse_args(sys.argv[1:])), default=str))\n"
)


@pytest.fixture(scope="module", autouse=True)
def engine_built() -> None:
    missing = [p for p in (PYTHON, MODEL_DIR / "config.json") if not p.exists()]
    if missing:
        pytest.fail(f"the SGLang CPU engine or its model is not built ({missing}); run make engine")


def sglang_parse(argv: list[str]) -> dict[str, object]:
    done = subprocess.run(
        [str(PYTHON), "-c", PARSE, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    parsed: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


PLAN = plan_cpu(CONFIG, 269_060_552, 0.25, 2048, engine=EngineKind.SGLANG_CPU)  # 0.25 GiB // 23,040 B


def cpu_spec(tmp_path: Path, user_args: tuple[str, ...] = (), port: int = 0):  # type: ignore[no-untyped-def]
    return build_sglang_cpu_spec(
        program=launcher_program(str(PYTHON)),
        model=str(MODEL_DIR),
        served_model_name="smol",
        plan=PLAN,
        host="127.0.0.1",
        port=port or free_port(),
        cache_dir=tmp_path / "cache",
        user_args=user_args,
        api_key="hek-" + secrets.token_urlsafe(16),  # as the console makes them: never read as a flag
    )


def test_sglangs_own_parser_takes_the_cpu_spec(tmp_path: Path) -> None:
    spec = cpu_spec(tmp_path)
    parsed = sglang_parse(spec.args)
    assert (parsed["device"], parsed["context_length"], parsed["max_total_tokens"]) == ("cpu", 2048, 11_650)
    assert parsed["grammar_backend"] == "llguidance" and parsed["enable_metrics"] and parsed["sleep_on_idle"]
    assert parsed["api_key"] is None and parsed["model_path"] == str(MODEL_DIR)  # the launcher adds the key
    assert spec.env[API_KEY_ENV] == spec.api_key and not any(spec.api_key in arg for arg in spec.argv)


def test_sglangs_own_parser_takes_the_container_command_hearth_builds() -> None:
    plan = GpuPlan(
        fits=True,
        tensor_parallel_size=2,
        gpu_indices=[0, 1],
        gpu_memory_utilization=0.88,
        max_model_len=32_768,
        max_num_seqs=64,
        kv_cache_dtype="fp8",
        weights_bytes=1,
        kv_bytes_per_token=1,
        kv_capacity_tokens=1,
        typical_context=1,
        concurrency_at_typical_context=1,
        split=None,
    )
    built = sglang_args(
        version="0.5.15.post1",
        model="/models/m",
        revision="abc",
        served_model_name="m",
        port=8000,
        api_key="k",
        plan=plan,
        user_args=["--tp", "2"],
    )
    assert built.command[:3] == launcher_program("python3") and built.env[API_KEY_ENV] == "k"
    parsed = sglang_parse(built.command[3:])
    assert (parsed["tp_size"], parsed["mem_fraction_static"], parsed["context_length"]) == (2, 0.88, 32_768)
    assert (parsed["max_running_requests"], parsed["kv_cache_dtype"], parsed["revision"]) == (64, "fp8_e4m3", "abc")
    assert parsed["enable_metrics"] and parsed["host"] == "0.0.0.0"  # inside its container


def session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (the runtime starts each engine in its own session)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def wait_ready(runtime: ProcessRuntime, base: str) -> None:
    deadline = time.monotonic() + READY_WITHIN
    while time.monotonic() < deadline:
        assert runtime.status("sgl").running, runtime.logs("sgl")[-3000:]
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    pytest.fail(f"SGLang did not answer /health within {READY_WITHIN} s:\n{runtime.logs('sgl')[-3000:]}")


def test_it_serves_streams_reports_its_kv_pool_and_stops_leaving_no_process(tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path)
    # Compact JSON keeps the 135M model's forced tool call short (llguidance honours this flag); the port, above
    # the ephemeral range as the console picks them (61000 and up here), is one SGLang refuses to start on unless
    # told a gRPC port (engines.sglang.grpc_port).
    flags = ("--tool-call-parser", "pythonic", "--constrained-json-disable-any-whitespace")
    spec = cpu_spec(tmp_path, user_args=flags, port=engine_port("127.0.0.1"))
    pid = int(runtime.start("sgl", spec).handle)
    base = f"http://127.0.0.1:{spec.port}"
    try:
        wait_ready(runtime, base)
        assert httpx.get(f"{base}/v1/models", timeout=10).status_code == 401  # the key is enforced
        # the launcher gave SGLang its key without putting it in the argv or the log (engines.sglang_launcher)
        assert spec.api_key.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        log = (tmp_path / "sgl.log").read_text()
        assert "api_key='<hidden>'" in log and spec.api_key not in log
        client = openai.OpenAI(base_url=f"{base}/v1", api_key=spec.api_key, max_retries=0, timeout=300)
        stream = client.chat.completions.create(
            model="smol",
            messages=[{"role": "user", "content": "Tell me about lighthouses."}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
        usage = chunks[-1].usage
        assert usage is not None and usage.completion_tokens == 12 and usage.prompt_tokens > 0

        city: dict[str, object] = {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
            "additionalProperties": False,
        }
        weather: ChatCompletionFunctionToolParam = {
            "type": "function",
            "function": {"name": "get_weather", "parameters": city},
        }
        answer = client.chat.completions.create(
            model="smol",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            max_tokens=40,
            temperature=0,
            tools=[weather],
            tool_choice="required",  # sampled, the model once added a "description" and ran out
        )
        assert runtime.status("sgl").running  # a constrained request once killed SGLang on CPU (xgrammar)
        calls = answer.choices[0].message.tool_calls or []
        assert [c.function.name for c in calls if c.type == "function"] == ["get_weather"]

        text = httpx.get(f"{base}/metrics", timeout=10).text
        flavor = choose_flavor(spec.engine, "0.5.15.post1", sample_names(text), DEFAULT_MAPPINGS)
        assert flavor == "sglang-0.5.7"
        scrape = parse_metrics(text, flavor, time.time())
        assert scrape.values["kv_cache_size_tokens"] == PLAN.kv_capacity_tokens == 11_650  # SGLang's own pool
        assert scrape.values["generation_tokens_total"] >= 12 and scrape.values["prompt_tokens_total"] > 0
        assert {"requests_running", "requests_waiting", "kv_cache_usage"} <= scrape.values.keys()
    finally:
        runtime.stop("sgl", grace_seconds=30)
    assert not runtime.status("sgl").running
    assert session_members(pid) == []  # scheduler and detokenizer went with it
