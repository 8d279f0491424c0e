"""What a sleep does to requests in flight (mode abort, wait, keep), to the prefix cache, and the sleep metrics' names,
as vLLM 0.32.0 has them (engines/simulator/SLEEP.md)."""

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engines.simulator.config import build_parser
from engines.simulator.metrics import OPERATION_BUCKETS
from tests.simulator.simproc import MODEL, Sim, SimFactory

DEV = {"VLLM_SERVER_DEV_MODE": "1"}
SLOW = ["--served-model-name", MODEL, "--decode-ms-per-token", "60"]  # a token every ~60 ms: abortable mid-answer
Start = Callable[..., Sim]


@pytest.fixture
def dev_sim(sim_factory: SimFactory) -> Iterator[Start]:
    """Start simulators with VLLM_SERVER_DEV_MODE=1; stopped when the test ends."""
    started: list[Sim] = []

    def start(*args: str) -> Sim:
        started.append(sim_factory(*args, env=DEV))
        return started[-1]

    yield start
    for sim in started:
        sim.stop()


def post(sim: Sim, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(sim.base + path, timeout=30, **kwargs)


def chat(tokens: int, stream: bool = False, text: str = "Hi") -> dict[str, Any]:
    messages = [{"role": "user", "content": text}]
    return {"model": MODEL, "messages": messages, "max_tokens": tokens, "ignore_eos": True, "stream": stream}


def gauge(sim: Sim, name: str) -> float:
    """One of vLLM's request gauges now (``vllm:num_requests_running`` or ``_waiting``)."""
    for family in text_string_to_metric_families(sim.scrape()):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise KeyError(name)


def until(check: Callable[[], bool], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def read_after_first_token(sim: Sim, path: str, body: dict[str, Any], then: Callable[[], Any]) -> list[Any]:
    """Stream ``body``, call ``then`` once the first token has come, and return every event (parsed)."""
    events: list[Any] = []
    with httpx.stream("POST", sim.base + path, json=body, timeout=60) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
                if len(events) == 2:  # the role chunk (or message_start, response.created) and one more
                    then()
    return events


def test_a_sleep_aborts_the_streams_in_flight_with_finish_reason_abort(dev_sim: Start) -> None:
    sim = dev_sim(*SLOW)
    events = read_after_first_token(sim, "/v1/chat/completions", chat(200, True), lambda: post(sim, "/sleep"))
    assert events[-1] == "[DONE]"  # a clean end, as vLLM's (SLEEP.md): finish_reason says what happened
    last = events[-2]["choices"][0]
    assert (last["finish_reason"], last["delta"]) == ("abort", {})
    assert len(events) < 200
    with ThreadPoolExecutor(1) as pool:  # queued while asleep; aborted by the next sleep's mode=abort
        queued = pool.submit(post, sim, "/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 5})
        until(lambda: gauge(sim, "vllm:num_requests_waiting") == 1, "the completion waits")
        post(sim, "/sleep?level=1")
        choice = queued.result(30).json()["choices"][0]
        assert (choice["finish_reason"], choice["text"]) == ("abort", "")


def test_an_aborted_anthropic_stream_ends_with_a_null_stop_reason(dev_sim: Start) -> None:
    sim = dev_sim(*SLOW)
    body = {"model": MODEL, "max_tokens": 200, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    events = read_after_first_token(sim, "/v1/messages", body, lambda: post(sim, "/sleep?level=2"))
    kinds = [event["type"] for event in events]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[-2]["delta"] == {"stop_reason": None, "stop_sequence": None}


def test_an_aborted_response_is_cancelled(dev_sim: Start) -> None:
    sim = dev_sim(*SLOW)
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(post, sim, "/v1/responses", json={"model": MODEL, "input": "Hi", "max_output_tokens": 200})
        until(lambda: gauge(sim, "vllm:num_requests_running") == 1, "the response is being written")
        post(sim, "/sleep")
        assert answer.result(30).json()["status"] == "cancelled"


def test_mode_wait_lets_the_running_requests_finish_first(dev_sim: Start) -> None:
    sim = dev_sim(*SLOW)
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(post, sim, "/v1/chat/completions", json=chat(8))
        until(lambda: gauge(sim, "vllm:num_requests_running") == 1, "the request runs")
        assert post(sim, "/sleep?mode=wait").json() == {"status": "sleeping", "level": 1}
        choice = answer.result(30).json()["choices"][0]
        assert choice["finish_reason"] == "length"  # finished whole, not aborted
    assert httpx.get(sim.base + "/is_sleeping").json() == {"is_sleeping": True}


def test_mode_keep_freezes_the_running_requests_until_the_wake(dev_sim: Start) -> None:
    sim = dev_sim(*SLOW)

    def sleep_and_wake() -> None:
        assert post(sim, "/sleep?mode=keep").status_code == 200
        assert httpx.get(sim.base + "/is_sleeping").json() == {"is_sleeping": True}
        assert post(sim, "/wake_up").json()["status"] == "awake"

    events = read_after_first_token(sim, "/v1/chat/completions", chat(12, True), sleep_and_wake)
    finishes = [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"]]
    assert finishes[-1] == "length" and "abort" not in finishes
    assert sum(1 for e in events[:-1] if e["choices"] and e["choices"][0]["delta"].get("content")) == 12


def test_a_sleep_of_level_1_or_2_empties_the_prefix_cache_and_level_0_does_not(dev_sim: Start) -> None:
    sim = dev_sim("--served-model-name", MODEL)
    long = "the same long prompt, " * 20

    def cached() -> int:
        answer = post(sim, "/v1/chat/completions", json=chat(2, text=long)).json()
        return int(answer["usage"]["prompt_tokens_details"]["cached_tokens"])

    cached()
    assert cached() > 0
    post(sim, "/sleep?level=0")
    post(sim, "/wake_up")
    assert cached() > 0
    post(sim, "/sleep?level=1")
    post(sim, "/wake_up")
    assert cached() == 0
    assert post(sim, "/reset_prefix_cache").json() == {"success": True}
    assert cached() == 0


def test_the_sleep_metrics_have_vllms_names_labels_and_buckets(dev_sim: Start, sim_factory: SimFactory) -> None:
    sim = dev_sim("--served-model-name", MODEL)
    before = {f.name: f for f in text_string_to_metric_families(sim.scrape())}
    assert "vllm:sleep_mode_operation_duration_seconds" not in before  # vLLM registers them at the first call
    state = before["vllm:engine_sleep_state"]
    assert state.type == "gauge"
    assert {tuple(sorted(s.labels.items())) for s in state.samples} == {
        (("engine", "0"), ("model_name", MODEL), ("sleep_state", name))
        for name in ("awake", "weights_offloaded", "discard_all")
    }
    post(sim, "/sleep")
    post(sim, "/wake_up")
    after = {f.name: f for f in text_string_to_metric_families(sim.scrape())}
    duration = after["vllm:sleep_mode_operation_duration_seconds"]
    assert duration.type == "histogram" and after["vllm:sleep_mode_operations_in_flight"].type == "gauge"
    counts = {s.labels["operation"]: s.value for s in duration.samples if s.name.endswith("_count")}
    assert counts == {"sleep": 1, "wake": 1}
    bounds = sorted({float(s.labels["le"]) for s in duration.samples if "le" in s.labels} - {float("inf")})
    assert bounds == [float(b) for b in OPERATION_BUCKETS]
    sglang = sim_factory("--metrics-flavor", "sglang", env=DEV)
    names = {f.name for f in text_string_to_metric_families(sglang.scrape())}
    assert not {n for n in names if n.startswith("vllm:")} and "hearth_sim_gpu_memory_bytes" in names
    sglang.stop()


def test_help_lists_the_sleep_flags() -> None:
    text = build_parser().format_help()
    for flag in ("--enable-sleep-mode", "--weights-bytes", "--gpu-memory-bytes", "--sleep-host-gb-per-s"):
        assert flag in text
    assert "--sleep-disk-gb-per-s" in text and "--fault-wake-fails [COUNT]" in text
