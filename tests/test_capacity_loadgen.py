"""The capacity check's load generator (console.capacity.loadgen) against a real simulator serving a reasoning
model (``--reasoning-parser``): its first tokens are reasoning, and they count, as ``vllm bench serve`` counts them
(a check on a thinking model once failed its calibration with "no tokens")."""

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from console.capacity import loadgen
from console.capacity.loadgen import Target
from engines.capacity.results import Sample
from tests.simulator.simproc import MODEL, Sim


@pytest.fixture
def thinker(tmp_path: Path) -> Iterator[Sim]:
    sim = Sim(["--served-model-name", MODEL, "--reasoning-parser", "deepseek_r1"], tmp_path / "sim.log")
    try:
        sim.wait_healthy()
        yield sim
    finally:
        sim.stop()


@pytest.mark.process
def test_a_reasoning_model_s_answer_counts_its_reasoning_tokens(thinker: Sim) -> None:
    target = Target(thinker.base, "", MODEL)

    async def calibrated_then_sent() -> tuple[float, Sample]:
        async with aiohttp.ClientSession() as session:
            per_word, _ = await loadgen.calibrate(session, target)
            return per_word, await loadgen.send(session, target, "Think, then say something.", 20, time.perf_counter())

    per_word, sample = asyncio.run(calibrated_then_sent())
    assert per_word > 0
    assert sample.error == "" and sample.ttft is not None
    assert sample.output_tokens == 20 and len(sample.itls) == 19  # every token timed, the 8 reasoning ones first
