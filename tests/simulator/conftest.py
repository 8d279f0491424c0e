"""Fixtures: simulators as real subprocesses, all stopped when the session ends."""

from collections.abc import Iterator

import pytest

from tests.simulator.simproc import API_KEY, MODEL, VLLM_FLAGS, Sim, SimFactory


@pytest.fixture(scope="session")
def sim_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFactory]:
    """Start simulators with the given flags and environment added (healthy ones unless ``wait=False``); all
    stopped at the end."""
    started: list[Sim] = []

    def start(*args: str, wait: bool = True, env: dict[str, str] | None = None) -> Sim:
        sim = Sim(list(args), tmp_path_factory.mktemp("sim") / "sim.log", env)
        started.append(sim)
        if wait:
            sim.wait_healthy()
        return sim

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture(scope="session")
def sim(sim_factory: SimFactory) -> Sim:
    """The shared simulator: an API key, a served name, Hearth's vLLM flags and an unknown one."""
    return sim_factory("--model", "models/sim-7b", "--served-model-name", MODEL, "--api-key", API_KEY, *VLLM_FLAGS)
