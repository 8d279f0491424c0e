"""engines.room: which least recently used idle deployments make room for another, in words with numbers; and the
memory rule a deployment's GPUs follow awake and asleep."""

from dataclasses import replace

import pytest

from engines.gpus import simulated_inventory
from engines.modelconfig import parse_config
from engines.planner import CUDA_CONTEXT, PlanRequest, plan_gpu
from engines.room import (
    ASLEEP_BYTES_PER_GPU,
    GIB,
    Action,
    Box,
    Holder,
    Need,
    Verdict,
    asleep_bytes_per_gpu,
    awake_bytes_per_gpu,
    duration_words,
    gpus_words,
    make_room,
)
from tests.test_planner import LLAMA_70B, LLAMA_70B_BYTES

H100 = int(79.6 * GIB)
BOX = Box({i: H100 for i in range(8)}, host_free_bytes=18 * GIB)
SEVENTY = int(73.2 * GIB)  # a 70B at TP 4 awake, per GPU (test_the_70b_plan_s_footprint_is_what_an_h100_holds)
RESIDENCY = 120.0
HOUR = 3600.0


def holder(name: str, gpus: tuple[int, ...], idle: float, **fields: object) -> Holder:
    defaults: dict[str, object] = {
        "awake_seconds": 10 * HOUR,
        "policy": "sleep",
        "can_sleep": True,
        "sleep_level": 2,
    }
    return Holder(name, gpus, SEVENTY, idle_seconds=idle, **(defaults | fields))  # type: ignore[arg-type]


LOW, HIGH = (0, 1, 2, 3), (4, 5, 6, 7)
NEED = Need("C", SEVENTY, 4)


def test_the_70b_plan_s_footprint_is_what_an_h100_holds_and_asleep_it_keeps_1_4_gib() -> None:
    plan = plan_gpu(
        parse_config(LLAMA_70B),
        LLAMA_70B_BYTES,
        simulated_inventory("8xH100-80GB"),
        PlanRequest(max_model_len=8192, tensor_parallel_size=4),
    )
    assert plan.split is not None and plan.fits
    awake = awake_bytes_per_gpu(plan)
    reserved = int(plan.split.total * plan.gpu_memory_utilization)
    assert awake == reserved + CUDA_CONTEXT + plan.split.cuda_graphs
    assert 72 * GIB < awake < 74 * GIB  # 73.9 GiB measured on an H100 awake (ai-dynamo/dynamo#11233)
    assert asleep_bytes_per_gpu(awake) == ASLEEP_BYTES_PER_GPU == int(1.4 * GIB)
    assert asleep_bytes_per_gpu(GIB) == GIB  # never more than it holds awake


@pytest.mark.parametrize(
    ("holders", "need", "consent", "verdict", "aside", "gpus", "words"),
    [
        pytest.param(
            [holder("A", LOW, 3 * HOUR + 12 * 60), holder("B", HIGH, 60)],
            NEED,
            False,
            Verdict.MAKE,
            [("A", Action.SLEEP)],
            LOW,
            "To fit C (73.2 GiB per GPU on GPUs 0–3) put A to sleep at level 2 (idle 3 h 12 min, frees 71.8 GiB "
            "on GPUs 0–3).",
            id="the least recently used goes to sleep",
        ),
        pytest.param(
            [holder("A", LOW, 60), holder("B", HIGH, 2 * HOUR)],
            NEED,
            False,
            Verdict.MAKE,
            [("B", Action.SLEEP)],
            HIGH,
            "put B to sleep at level 2 (idle 2 h 0 min, frees 71.8 GiB on GPUs 4–7)",
            id="whichever GPUs it holds",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, in_flight=1), holder("B", HIGH, 60)],
            NEED,
            False,
            Verdict.MAKE,
            [("B", Action.SLEEP)],
            HIGH,
            "put B to sleep",
            id="never one with a request in flight",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, always_on=True, policy="stay", can_sleep=False), holder("B", HIGH, 60)],
            NEED,
            True,
            Verdict.MAKE,
            [("B", Action.SLEEP)],
            HIGH,
            "put B to sleep",
            id="never an always-on one, even with consent",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, awake_seconds=30), holder("B", HIGH, 60)],
            NEED,
            False,
            Verdict.MAKE,
            [("B", Action.SLEEP)],
            HIGH,
            "put B to sleep",
            id="one woken under the residency stays",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, policy="stop"), holder("B", HIGH, 60)],
            NEED,
            False,
            Verdict.MAKE,
            [("A", Action.STOP)],
            LOW,
            "stop A (idle 3 h 0 min, frees 73.2 GiB on GPUs 0–3)",
            id="a stop policy stops",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, sleep_level=1, host_bytes=141 * 10**9), holder("B", HIGH, 60)],
            NEED,
            False,
            Verdict.MAKE,
            [("A", Action.STOP)],
            LOW,
            "stop A (idle 3 h 0 min, frees 73.2 GiB on GPUs 0–3; a level-1 sleep would copy 131.3 GiB of weights to "
            "host RAM, 18.0 GiB is free: stopped instead)",
            id="level 1 whose weights do not fit the host RAM is stopped",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, sleep_level=1, host_bytes=16 * 10**9), holder("B", HIGH, 60)],
            NEED,
            False,
            Verdict.MAKE,
            [("A", Action.SLEEP)],
            LOW,
            "put A to sleep at level 1",
            id="level 1 whose weights fit the host RAM sleeps",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, can_sleep=False), holder("B", HIGH, 60)],
            NEED,
            False,
            Verdict.MAKE,
            [("A", Action.STOP)],
            LOW,
            "its engine was started without sleep mode: stopped instead",
            id="an engine without sleep mode is stopped",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, policy="stay", can_sleep=False), holder("B", HIGH, 60, policy="stay")],
            NEED,
            False,
            Verdict.ASK,
            [("A", Action.STOP)],
            LOW,
            "stop A (idle 3 h 0 min, frees 73.2 GiB on GPUs 0–3). The idle policy of A is stay: only an admin's "
            "consent puts it aside.",
            id="a stay policy needs consent",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, policy="stay", can_sleep=False), holder("B", HIGH, 60, policy="stay")],
            NEED,
            True,
            Verdict.MAKE,
            [("A", Action.STOP)],
            LOW,
            "stop A",
            id="and with it is put aside",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, policy="stay"), holder("B", HIGH, 60)],
            NEED,
            False,
            Verdict.MAKE,
            [("B", Action.SLEEP)],
            HIGH,
            "put B to sleep",
            id="one whose policy allows it before a stay one that is older",
        ),
        pytest.param(
            [holder("A", (0, 1), 3 * HOUR), holder("B", (2, 3), 2 * HOUR), holder("D", HIGH, HOUR, always_on=True)],
            NEED,
            False,
            Verdict.MAKE,
            [("A", Action.SLEEP), ("B", Action.SLEEP)],
            LOW,
            "put A to sleep at level 2 (idle 3 h 0 min, frees 71.8 GiB on GPUs 0, 1) and put B to sleep at level 2 "
            "(idle 2 h 0 min, frees 71.8 GiB on GPUs 2, 3)",
            id="as many as it takes, oldest first",
        ),
        pytest.param(
            [holder("A", (0, 1), 3 * HOUR), holder("B", (2, 3, 4, 5), 2 * HOUR), holder("D", (6, 7), HOUR)],
            NEED,
            False,
            Verdict.MAKE,
            [("B", Action.SLEEP)],
            (2, 3, 4, 5),
            "put B to sleep",
            id="an older one that cannot make room alone is given back when a younger can",
        ),
        pytest.param(
            [holder("A", (0, 1), 3 * HOUR), holder("B", (2, 3, 4, 5), 2 * HOUR), holder("D", (6, 7), HOUR)],
            Need("C", SEVENTY, 2),
            False,
            Verdict.MAKE,
            [("A", Action.SLEEP)],
            (0, 1),
            "put A to sleep",
            id="and no more",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR), holder("C", LOW, 60)],
            Need("B", SEVENTY, 4, HIGH),
            False,
            Verdict.FITS,
            [],
            HIGH,
            "B (73.2 GiB per GPU on GPUs 4–7) fits the free GPUs.",
            id="free GPUs: nothing put aside",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, asleep=True), holder("B", HIGH, 60)],
            NEED,
            False,
            Verdict.FITS,
            [],
            LOW,
            "fits the free GPUs",
            id="beside an asleep one's 1.4 GiB",
        ),
        pytest.param(
            [holder("A", HIGH, 3 * HOUR), holder("C", LOW, 60)],
            Need("B", SEVENTY, 4, LOW),
            False,
            Verdict.MAKE,
            [("C", Action.SLEEP)],
            LOW,
            "To fit B (73.2 GiB per GPU on GPUs 0–3) put C to sleep at level 2 (idle 1 min",
            id="a wake in place frees its own GPUs, not the least recently used elsewhere",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, in_flight=2), holder("B", HIGH, 60, always_on=True)],
            NEED,
            False,
            Verdict.WAIT,
            [],
            (),
            "C (73.2 GiB per GPU on 4 GPUs) waits for room: A has 2 requests in flight.",
            id="a request in flight: wait",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, awake_seconds=40), holder("B", HIGH, 60, always_on=True)],
            NEED,
            False,
            Verdict.WAIT,
            [],
            (),
            "waits for room: A came up 40 s ago (launched or woken) and stays up 1 min more.",
            id="a residency: wait",
        ),
        pytest.param(
            [holder("A", LOW, 3 * HOUR, always_on=True), holder("B", HIGH, 60, state="loading", ready=False)],
            NEED,
            True,
            Verdict.NONE,
            [],
            (),
            "No room for C (73.2 GiB per GPU on 4 GPUs): A is always on; B is loading.",
            id="no room",
        ),
        pytest.param(  # a check read "A came up 40 s ago … stays up 1 min more" as "retry in a minute"
            [holder("A", LOW, 60, awake_seconds=40, policy="stay"), holder("B", HIGH, 60, always_on=True)],
            NEED,
            False,
            Verdict.NONE,
            [],
            (),
            "No room for C (73.2 GiB per GPU on 4 GPUs): A has the idle policy stay; B is always on.",
            id="a stay policy within its residency",
        ),
        pytest.param(
            [],
            Need("C", 90 * GIB, 1),
            False,
            Verdict.NONE,
            [],
            (),
            "No room for C (90.0 GiB per GPU on 1 GPU): not even with every other deployment put aside.",
            id="larger than a GPU",
        ),
    ],
)
def test_make_room(
    holders: list[Holder],
    need: Need,
    consent: bool,
    verdict: Verdict,
    aside: list[tuple[str, Action]],
    gpus: tuple[int, ...],
    words: str,
) -> None:
    room = make_room(need, holders, BOX, residency=RESIDENCY, consent=consent)
    assert room.verdict == verdict, room.words()
    assert [(s.holder.name, s.action) for s in room.steps] == aside
    assert room.gpus == gpus
    assert words in room.words()


def test_level_1_copies_add_up_against_the_host_ram() -> None:
    small = 10 * 10**9
    holders = [
        holder("A", (0, 1), 3 * HOUR, sleep_level=1, host_bytes=small),
        holder("B", (2, 3), 2 * HOUR, sleep_level=1, host_bytes=small),
        holder("D", HIGH, HOUR, always_on=True),
    ]
    room = make_room(NEED, holders, BOX, residency=RESIDENCY)
    assert [s.action for s in room.steps] == [Action.SLEEP, Action.STOP]  # 18 GiB hold one 10 GB copy, not two
    assert "8.7 GiB is free: stopped instead" in room.words()


def test_other_processes_memory_counts_as_used() -> None:
    busy = replace(BOX, others={i: 10 * GIB for i in range(4)})
    room = make_room(NEED, [holder("A", HIGH, HOUR)], busy, residency=RESIDENCY)
    assert room.verdict == Verdict.MAKE and room.gpus == HIGH


@pytest.mark.parametrize(
    ("indices", "words"),
    [((2,), "GPU 2"), ((0, 1, 2, 3), "GPUs 0–3"), ((0, 1), "GPUs 0, 1"), ((6, 0, 1, 2, 3), "GPUs 0–3, 6")],
)
def test_gpus_in_words(indices: tuple[int, ...], words: str) -> None:
    assert gpus_words(indices) == words


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(45, "45 s"), (31 * 60, "31 min"), (3 * 3600 + 12 * 60, "3 h 12 min"), (52 * 3600, "2 d 4 h")],
)
def test_durations_in_words(seconds: float, words: str) -> None:
    assert duration_words(seconds) == words


def test_a_new_deployment_gets_empty_gpus_before_an_asleep_ones() -> None:
    """As console.deployments.planning takes them: a trial's new 8B went on an asleep model's GPU 6 with GPU 7
    empty, and the asleep model could not wake."""
    asleep = holder("Q", (6,), HOUR, asleep=True)
    busy = holder("A", (0, 1, 2, 3), 60.0, ready=True, in_flight=1)
    other = holder("B", (4, 5), 60.0, ready=True, in_flight=1)
    room = make_room(Need("F", SEVENTY, 1), [busy, other, asleep], BOX, residency=RESIDENCY)
    assert room.verdict == Verdict.FITS and room.gpus == (7,), room
