"""The simulator's log, like vLLM's: a line per request unless --disable-uvicorn-access-log, which Hearth passes."""

import time

import httpx

from tests.simulator.simproc import SimFactory

REQUEST_LINE = '"GET /metrics HTTP/1.1" 200'


def test_the_access_log_is_on_by_default_and_off_with_vllm_s_flag(sim_factory: SimFactory) -> None:
    loud, quiet = sim_factory(), sim_factory("--disable-uvicorn-access-log")
    for sim in (loud, quiet):
        for _ in range(3):
            assert httpx.get(sim.base + "/metrics", timeout=10).status_code == 200
    deadline = time.monotonic() + 10  # the line is written once the answer is out
    while loud.output().count(REQUEST_LINE) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert loud.output().count(REQUEST_LINE) == 3
    assert REQUEST_LINE not in quiet.output() and "Application startup complete." in quiet.output()
