"""Per-request and instance faults, as a client sees them."""

import subprocess
import sys
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from engines.logscan import listen_failure
from tests.conftest import free_port
from tests.simulator.simproc import MODEL, ROOT, Sim, SimFactory, auth, stream_events


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": user(text), "stream": True, **extra}


def contents(events: list[Any]) -> list[str]:
    return [d["choices"][0]["delta"]["content"] for _, d in events if d != "[DONE]" and d["choices"][0]["delta"]]


def test_die_mid_stream_kills_the_process_and_cuts_the_stream(sim_factory: SimFactory) -> None:
    doomed = sim_factory("--served-model-name", MODEL, "--api-key", "sim-test-key")
    events = stream_events(doomed, "/v1/chat/completions", chat("Hi"), {"x-sim-fault": "die-mid-stream"})
    assert "[DONE]" not in [d for _, d in events]
    assert len([c for c in contents(events) if c]) == 3  # the default: 3 tokens, then the end
    assert all(d["choices"][0]["finish_reason"] is None for _, d in events)
    assert doomed.proc.wait(10) == 1
    assert "die-mid-stream" in doomed.output()


def test_drop_mid_stream_cuts_one_stream_and_the_server_lives_on(sim: Sim) -> None:
    events = stream_events(sim, "/v1/chat/completions", chat("Hi"), {"x-sim-fault": "drop-mid-stream=4"})
    assert "[DONE]" not in [d for _, d in events]
    assert len([c for c in contents(events) if c]) == 4  # exactly the 4 tokens the fault allows
    assert sim.proc.poll() is None
    assert sim.openai().chat.completions.create(model=MODEL, messages=user("Still there?"), max_tokens=2).choices


def test_a_marker_in_the_message_drops_an_anthropic_stream(sim: Sim) -> None:
    body = {"model": MODEL, "max_tokens": 50, "stream": True, "messages": user("Hi [[sim:drop-mid-stream]]")}
    names = [name for name, _ in stream_events(sim, "/v1/messages", body)]
    assert names[:2] == ["message_start", "content_block_start"] and "content_block_delta" in names
    assert "message_stop" not in names and "message_delta" not in names


def test_stall_first_delays_the_first_byte(sim: Sim) -> None:
    started = time.monotonic()
    headers = {**auth(), "x-sim-fault": "stall-first=0.8"}
    with httpx.stream("POST", sim.base + "/v1/chat/completions", json=chat("Hi", max_tokens=3), headers=headers) as r:
        chunks = r.iter_raw()
        first = next(chunks)
        waited = time.monotonic() - started
        rest = first + b"".join(chunks)
    assert waited >= 0.8
    assert rest.endswith(b"data: [DONE]\n\n")


def test_stall_between_spaces_the_tokens(sim: Sim) -> None:
    started = time.monotonic()
    text = "Hi [[sim:stall-between=0.2]]"
    resp = sim.openai().chat.completions.create(model=MODEL, messages=user(text), max_tokens=4)
    assert time.monotonic() - started >= 0.6  # three gaps after the first token
    assert resp.usage is not None and resp.usage.completion_tokens == 4


def test_error_500_from_header_and_from_marker(sim: Sim) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        sim.openai().chat.completions.create(
            model=MODEL, messages=user("Hi"), extra_headers={"x-sim-fault": "error-500"}
        )
    body: Any = caught.value.body
    assert caught.value.status_code == 500 and body["code"] == 500 and body["message"]
    with pytest.raises(anthropic.InternalServerError):
        sim.anthropic().messages.create(model=MODEL, max_tokens=5, messages=user("Hi [[sim:error-500]]"))


def test_context_length_fault_gives_the_error_with_real_numbers(sim: Sim) -> None:
    count = httpx.post(sim.base + "/tokenize", json={"messages": user("Hi [[sim:context-length]]")}).json()["count"]
    with pytest.raises(openai.BadRequestError) as caught:
        sim.openai().chat.completions.create(model=MODEL, messages=user("Hi [[sim:context-length]]"), max_tokens=50)
    assert f"you requested {count + 50} tokens ({count} in the messages, 50 in the completion)" in str(caught.value)


def test_an_unknown_fault_is_a_400_naming_the_known_ones(sim: Sim) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sim.openai().chat.completions.create(model=MODEL, messages=user("Hi [[sim:explode]]"))
    assert "die-mid-stream" in str(caught.value)


@pytest.mark.process
def test_oom_at_start_exits_1_with_the_cuda_oom_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "engines.simulator", "--fault-oom-at-start"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB." in done.stderr


@pytest.mark.process
def test_port_taken_says_so_as_sglang_does_and_hangs_without_listening() -> None:
    port = free_port()
    argv = [sys.executable, "-m", "engines.simulator", "--fault-port-taken", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines = iter(proc.stderr.readline, "")
        said = next(line for line in lines if "bind" in line)
        address = f"('127.0.0.1', {port})"
        assert (
            listen_failure(said)
            == f"[Errno 98] error while attempting to bind on address {address}: address already in use"
        )
        assert "Waiting for application shutdown." in next(lines)
        time.sleep(1)
        assert proc.poll() is None  # hangs, as SGLang 0.5.15 does
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.process
def test_a_kv_budget_below_one_request_refuses_to_start() -> None:
    args = ["--max-model-len", "4096", "--kv-cache-tokens", "1024"]
    done = subprocess.run([sys.executable, "-m", "engines.simulator", *args], cwd=ROOT, capture_output=True, timeout=30)
    assert done.returncode == 1 and b"max seq len (4096)" in done.stderr


def test_load_seconds_gives_503_then_200(sim_factory: SimFactory) -> None:
    loading = sim_factory("--load-seconds", "3", wait=False)
    assert loading.wait_listening().status_code == 503
    loading.wait_healthy()
    assert httpx.get(loading.base + "/health").status_code == 200
