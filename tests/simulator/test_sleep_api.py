"""vLLM 0.32.0's sleep routes on the simulator, as a client sees them: the gating, each route's answers, requests held
while asleep and served after the wake, the memory gauges, wake times, a failed wake (engines/simulator/SLEEP.md)."""

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engines.simulator.sleep import RESIDUAL_BYTES_PER_GPU, WAKE_BASE_SECONDS
from tests.simulator.simproc import MODEL, ROOT, Sim, SimFactory, sse

DEV = {"VLLM_SERVER_DEV_MODE": "1"}
GB = 10**9
SLEEPY = ["--served-model-name", MODEL, "--enable-sleep-mode", "--weights-bytes", str(2 * GB)]
SLEEPY += ["--gpu-memory-bytes", str(40 * GB)]
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
Start = Callable[..., Sim]


@pytest.fixture
def dev_sim(sim_factory: SimFactory) -> Iterator[Start]:
    """Start simulators with VLLM_SERVER_DEV_MODE=1 (or the env given); stopped when the test ends."""
    started: list[Sim] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Sim:
        started.append(sim_factory(*args, env=env or DEV))
        return started[-1]

    yield start
    for sim in started:
        sim.stop()


def post(sim: Sim, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(sim.base + path, timeout=30, **kwargs)


def gauges(sim: Sim) -> dict[str, float]:
    """The sleep gauges: ``hearth_sim_*`` by name, ``vllm:engine_sleep_state`` by its sleep_state label."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(sim.scrape()):
        for sample in family.samples:
            if sample.name.startswith("hearth_sim_"):
                out[sample.name] = sample.value
            elif sample.name == "vllm:engine_sleep_state":
                out[sample.labels["sleep_state"]] = sample.value
            elif sample.name == "vllm:num_requests_waiting":
                out["waiting"] = sample.value
    return out


def until(check: Callable[[], bool], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def test_the_routes_are_there_only_in_dev_mode_and_take_no_api_key(sim: Sim, dev_sim: Start) -> None:
    assert post(sim, "/sleep").status_code == 404 and httpx.get(sim.base + "/is_sleeping").status_code == 404
    off = dev_sim("--api-key", "k", env={"VLLM_SERVER_DEV_MODE": "0"})
    assert post(off, "/wake_up").status_code == 404
    on = dev_sim("--api-key", "k")
    assert post(on, "/sleep").json() == {"status": "sleeping", "level": 1}  # no key: vLLM guards /v1 only
    assert httpx.get(on.base + "/v1/models").status_code == 401


@pytest.mark.process
def test_a_dev_mode_that_is_not_an_integer_stops_the_start() -> None:
    env = {"VLLM_SERVER_DEV_MODE": "true", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "engines.simulator"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1 and "ValueError: invalid literal for int() with base 10: 'true'" in done.stderr


def test_sleep_wake_and_is_sleeping_answer_as_vllm(dev_sim: Start) -> None:
    sim = dev_sim(*SLEEPY)
    assert httpx.get(sim.base + "/is_sleeping").json() == {"is_sleeping": False}
    assert post(sim, "/wake_up").json() == {"status": "awake", "tags": None}  # awake already: a no-op
    assert post(sim, "/sleep?level=2").json() == {"status": "sleeping", "level": 2}
    assert httpx.get(sim.base + "/is_sleeping").json() == {"is_sleeping": True}
    for path in ("/health", "/metrics", "/v1/models", "/version"):  # served while asleep
        assert httpx.get(sim.base + path).status_code == 200, path
    assert post(sim, "/tokenize", json={"prompt": "hi"}).status_code == 200
    assert post(sim, "/wake_up").json() == {"status": "awake", "tags": None}
    assert httpx.get(sim.base + "/is_sleeping").json() == {"is_sleeping": False}
    gone = httpx.get(sim.base + "/sleep")
    assert (gone.status_code, gone.json()) == (405, {"detail": "Method Not Allowed"})


def test_a_bad_level_or_mode_is_vllms_validation_error(dev_sim: Start) -> None:
    sim = dev_sim()
    bad = post(sim, "/sleep?level=3")
    error = bad.json()["error"]
    assert bad.status_code == 400 and (error["type"], error["param"], error["code"]) == (
        "Bad Request",
        "query.level",
        400,
    )
    assert error["message"] == (  # the wording of a real vLLM 0.32.0 (SLEEP.md)
        "1 validation error:\n  {'type': 'less_than_equal', 'loc': 'query.level', 'msg': 'Input should be less than "
        "or equal to 2', 'input': '3', 'ctx': {'le': 2}}"
    )
    assert "'type': 'int_parsing'" in post(sim, "/sleep?level=abc").json()["error"]["message"]
    both = post(sim, "/sleep?level=-1&mode=bogus").json()["error"]
    assert both["message"].startswith("2 validation errors:\n  {'type': 'greater_than_equal'")
    assert "\"Input should be 'abort', 'wait' or 'keep'\"" in both["message"] and both["param"] == "query.level"
    assert httpx.get(sim.base + "/is_sleeping").json() == {"is_sleeping": False}


def test_requests_wait_while_asleep_and_are_served_after_the_wake(dev_sim: Start) -> None:
    sim = dev_sim(*SLEEPY)
    post(sim, "/sleep")
    heads: list[int] = []

    def streamed() -> list[str]:
        body = {**CHAT, "stream": True}
        with httpx.stream("POST", sim.base + "/v1/chat/completions", json=body, timeout=60) as resp:
            heads.append(resp.status_code)
            return [data for _, data in sse(resp)]

    with ThreadPoolExecutor(3) as pool:
        plain = pool.submit(post, sim, "/v1/chat/completions", json=CHAT)
        embedded = pool.submit(post, sim, "/v1/embeddings", json={"model": MODEL, "input": "hi"})
        stream = pool.submit(streamed)
        until(lambda: gauges(sim)["waiting"] == 2 and heads == [200], "both chats wait and the stream has its head")
        assert not (plain.done() or embedded.done() or stream.done())  # vLLM queues them: no answer, no error
        assert post(sim, "/wake_up").json()["status"] == "awake"
        assert plain.result(30).json()["choices"][0]["finish_reason"] == "length"
        assert embedded.result(30).status_code == 200
        assert stream.result(30)[-1] == "[DONE]"


def test_tags_wake_part_of_the_engine_and_the_gauges_follow(dev_sim: Start) -> None:
    sim = dev_sim(*SLEEPY, "-tp", "2")
    assert gauges(sim) == {
        "hearth_sim_gpu_memory_bytes": 40 * GB,
        "hearth_sim_gpu_memory_awake_bytes": 40 * GB,
        "hearth_sim_host_memory_bytes": 0,
        "hearth_sim_weights_loaded": 1,
        "awake": 1,
        "weights_offloaded": 0,
        "discard_all": 0,
        "waiting": 0,
    }
    post(sim, "/sleep?level=1")
    asleep = gauges(sim)
    assert asleep["hearth_sim_gpu_memory_bytes"] == 2 * RESIDUAL_BYTES_PER_GPU
    assert asleep["hearth_sim_host_memory_bytes"] == 2 * GB and (asleep["awake"], asleep["weights_offloaded"]) == (0, 1)
    assert post(sim, "/wake_up?tags=weights").json() == {"status": "sleeping", "tags": ["weights"]}
    assert gauges(sim)["hearth_sim_gpu_memory_bytes"] == 2 * RESIDUAL_BYTES_PER_GPU + 2 * GB
    assert post(sim, "/wake_up?tags=bogus").json() == {"status": "sleeping", "tags": ["bogus"]}
    assert httpx.get(sim.base + "/is_sleeping").json() == {"is_sleeping": True}
    assert post(sim, "/wake_up?tags=kv_cache").json() == {"status": "awake", "tags": ["kv_cache"]}
    assert gauges(sim)["hearth_sim_gpu_memory_bytes"] == 40 * GB and gauges(sim)["awake"] == 1


def test_level_2_needs_reload_weights_and_level_0_frees_nothing(dev_sim: Start) -> None:
    sim = dev_sim(*SLEEPY, "-tp", "4")
    post(sim, "/sleep?level=2")
    asleep = gauges(sim)
    assert asleep["discard_all"] == 1 and asleep["hearth_sim_host_memory_bytes"] == 0
    post(sim, "/wake_up")
    assert gauges(sim)["hearth_sim_weights_loaded"] == 0  # awake, the weights' memory back but not their values
    reloaded = post(sim, "/collective_rpc", json={"method": "reload_weights"})
    assert reloaded.json() == {"results": [None] * 4} and gauges(sim)["hearth_sim_weights_loaded"] == 1
    assert post(sim, "/collective_rpc", json={"method": "nope"}).status_code == 500
    assert post(sim, "/sleep?level=0").json() == {"status": "sleeping", "level": 0}
    paused = gauges(sim)
    assert (paused["awake"], paused["weights_offloaded"], paused["discard_all"]) == (0, 0, 0)
    assert paused["hearth_sim_gpu_memory_bytes"] == 40 * GB
    assert post(sim, "/wake_up?tags=scheduling").json() == {"status": "awake", "tags": ["scheduling"]}


def test_without_enable_sleep_mode_sleep_pauses_but_releases_nothing(dev_sim: Start) -> None:
    sim = dev_sim("--weights-bytes", str(2 * GB), "--gpu-memory-bytes", str(40 * GB))
    post(sim, "/sleep?level=1")
    assert httpx.get(sim.base + "/is_sleeping").json() == {"is_sleeping": True}
    assert gauges(sim)["hearth_sim_gpu_memory_bytes"] == 40 * GB and gauges(sim)["hearth_sim_host_memory_bytes"] == 0
    post(sim, "/wake_up")


def timed(sim: Sim, path: str, **kwargs: Any) -> float:
    started = time.monotonic()
    assert post(sim, path, **kwargs).status_code == 200
    return time.monotonic() - started


def test_wake_time_scales_with_the_weights_bytes_and_the_level(dev_sim: Start) -> None:
    flags = ["--enable-sleep-mode", "--sleep-host-gb-per-s", "2", "--sleep-disk-gb-per-s", "2"]
    small, big = dev_sim(*flags, "--weights-bytes", str(GB)), dev_sim(*flags, "--weights-bytes", str(3 * GB))
    for sim in (small, big):
        post(sim, "/sleep?level=1")
    assert timed(small, "/wake_up") >= WAKE_BASE_SECONDS + 0.5  # 1 GB over 2 GB/s
    level_1 = timed(big, "/wake_up")
    assert level_1 >= WAKE_BASE_SECONDS + 1.5
    post(big, "/sleep?level=2")
    assert timed(big, "/wake_up") < level_1 - 1.0  # nothing to copy back: the weights are read again instead
    assert timed(big, "/collective_rpc", json={"method": "reload_weights"}) >= 0.3 + 1.5


def test_a_failed_wake_answers_500_and_the_engine_stays_asleep(dev_sim: Start) -> None:
    sim = dev_sim(*SLEEPY, "--fault-wake-fails", "1")
    post(sim, "/sleep")
    with ThreadPoolExecutor(1) as pool:
        held: Future[httpx.Response] = pool.submit(post, sim, "/v1/chat/completions", json=CHAT)
        until(lambda: gauges(sim)["waiting"] == 1, "the request waits")
        failed = post(sim, "/wake_up")
        assert failed.status_code == 500 and failed.json()["error"] == {
            "message": "Call to wake_up method failed: CUDA Error: out of memory at <path>:139",
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
        assert httpx.get(sim.base + "/is_sleeping").json() == {"is_sleeping": True} and not held.done()
        left = gauges(sim)
        assert left["awake"] == 0 and left["hearth_sim_gpu_memory_bytes"] == RESIDUAL_BYTES_PER_GPU + 2 * GB
        assert post(sim, "/wake_up").json()["status"] == "awake"  # the fault struck once
        assert held.result(30).status_code == 200
