"""The simulator's sleep model driven directly (no HTTP, no process): vLLM 0.32.0's tag and pause rules, the seconds
each step takes by level, bytes and GPUs, the memory held, a failed wake, and the flags and environment that gate it
(engines/simulator/SLEEP.md)."""

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from engines.simulator import sleep as sleep_model
from engines.simulator.config import dev_mode, parse_config
from engines.simulator.metrics import SimMetrics
from engines.simulator.scheduler import Engine
from engines.simulator.sleep import RESIDUAL_BYTES_PER_GPU, WAKE_OOM, Sleeper, WakeFailed

GB = 10**9
GPU = 80 * GB


class Clock:
    """Records the simulated seconds the sleeper spends instead of spending them."""

    def __init__(self) -> None:
        self.spent: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.spent.append(seconds)

    def total(self) -> float:
        return sum(self.spent)


def sleeper(*flags: str) -> tuple[Sleeper, Clock]:
    cfg = parse_config(list(flags))
    clock = Clock()
    return Sleeper(cfg, Engine(cfg, SimMetrics("vllm", "m", {})), clock), clock


def run[R](step: Callable[[], Coroutine[Any, Any, R]]) -> R:
    return asyncio.run(step())


def seconds_of(clock: Clock, step: Callable[[], Coroutine[Any, Any, object]]) -> float:
    before = clock.total()
    run(step)
    return clock.total() - before


def test_level_1_copies_the_weights_out_and_back_each_gpu_its_share() -> None:
    s, clock = sleeper("--enable-sleep-mode", "--weights-bytes", str(24 * GB), "--gpu-memory-bytes", str(2 * GPU))
    s2, clock2 = sleeper("--enable-sleep-mode", "--weights-bytes", str(24 * GB), "-tp", "2")
    assert seconds_of(clock, lambda: s.sleep(1, "abort")) == pytest.approx(24 / 12)  # 12 GB/s by default
    assert seconds_of(clock, lambda: s.wake_up(None)) == pytest.approx(sleep_model.WAKE_BASE_SECONDS + 24 / 12)
    run(lambda: s2.sleep(1, "abort"))
    assert seconds_of(clock2, lambda: s2.wake_up(None)) == pytest.approx(sleep_model.WAKE_BASE_SECONDS + 12 / 12)


def test_wake_time_grows_with_the_weights_and_the_bandwidth_flags() -> None:
    def wake(*flags: str) -> float:
        s, clock = sleeper("--enable-sleep-mode", *flags)
        run(lambda: s.sleep(1, "abort"))
        return seconds_of(clock, lambda: s.wake_up(None))

    small, big = wake("--weights-bytes", str(6 * GB)), wake("--weights-bytes", str(60 * GB))
    assert big - small == pytest.approx(54 / 12)
    assert wake("--weights-bytes", str(60 * GB), "--sleep-host-gb-per-s", "24") == pytest.approx(0.14 + 60 / 24)


def test_level_2_discards_the_weights_and_reload_reads_them_from_disk() -> None:
    s, clock = sleeper("--enable-sleep-mode", "--weights-bytes", str(39 * GB), "--gpu-memory-bytes", str(GPU))
    assert seconds_of(clock, lambda: s.sleep(2, "abort")) == 0
    assert dict(s.memory())["host_memory_bytes"] == 0
    assert seconds_of(clock, lambda: s.wake_up(None)) == pytest.approx(sleep_model.WAKE_BASE_SECONDS)  # no copy
    assert not s.sleeping and dict(s.memory())["weights_loaded"] == 0  # awake, but not the checkpoint's weights
    assert seconds_of(clock, s.reload_weights) == pytest.approx(sleep_model.RELOAD_BASE_SECONDS + 39 / 3.9)
    assert dict(s.memory())["weights_loaded"] == 1


def test_memory_held_asleep_awake_and_partly_woken() -> None:
    s, _ = sleeper(
        "--enable-sleep-mode", "--weights-bytes", str(140 * GB), "--gpu-memory-bytes", str(288 * GB), "-tp", "4"
    )
    awake = {"gpu_memory_bytes": 288 * GB, "gpu_memory_awake_bytes": 288 * GB, "host_memory_bytes": 0}
    assert dict(s.memory()) == {**awake, "weights_loaded": 1}
    run(lambda: s.sleep(1, "abort"))
    residue = 4 * RESIDUAL_BYTES_PER_GPU
    assert dict(s.memory())["gpu_memory_bytes"] == residue and dict(s.memory())["host_memory_bytes"] == 140 * GB
    assert run(lambda: s.wake_up(["weights"])) is False and s.sleeping
    assert dict(s.memory())["gpu_memory_bytes"] == residue + 140 * GB and dict(s.memory())["host_memory_bytes"] == 0
    assert run(lambda: s.wake_up(["kv_cache"])) is True and not s.sleeping
    assert dict(s.memory()) == {**awake, "weights_loaded": 1}


def test_a_tag_that_does_not_sleep_makes_the_wake_do_nothing() -> None:
    s, _ = sleeper("--enable-sleep-mode", "--weights-bytes", str(GB))
    run(lambda: s.sleep(1, "abort"))
    assert run(lambda: s.wake_up(["weights", "bogus"])) is False
    assert s.tags == {"weights", "kv_cache"} and s.resident == set()
    run(lambda: s.wake_up(["weights"]))
    assert run(lambda: s.wake_up(["weights"])) is False and s.tags == {"kv_cache"}  # weights sleep no more


def test_level_0_only_pauses_and_scheduling_resumes_it() -> None:
    s, clock = sleeper("--enable-sleep-mode", "--weights-bytes", str(GB))
    run(lambda: s.sleep(0, "abort"))
    assert s.sleeping and s.engine.paused == "new" and s.tags == set() and clock.total() == 0
    assert dict(s.memory())["gpu_memory_bytes"] == GB
    assert run(lambda: s.wake_up(["scheduling"])) is True and not s.sleeping and s.engine.paused is None


def test_sleeping_again_changes_nothing_until_a_wake() -> None:
    s, clock = sleeper("--enable-sleep-mode", "--weights-bytes", str(12 * GB))
    run(lambda: s.sleep(1, "abort"))
    assert seconds_of(clock, lambda: s.sleep(2, "abort")) == 0  # vLLM: "Executor is already sleeping."
    assert s.host_copy and s.weights_loaded  # the level-1 copy stays: the second sleep did nothing


def test_without_enable_sleep_mode_a_sleep_pauses_and_frees_nothing() -> None:
    s, clock = sleeper("--weights-bytes", str(12 * GB), "--gpu-memory-bytes", str(GPU))
    run(lambda: s.sleep(2, "keep"))
    assert s.sleeping and s.engine.paused == "all" and dict(s.memory())["gpu_memory_bytes"] == GPU
    assert run(lambda: s.wake_up(None)) is True and clock.total() == 0 and s.weights_loaded


def test_a_failed_wake_leaves_the_weights_mapped_and_the_engine_asleep() -> None:
    s, clock = sleeper("--enable-sleep-mode", "--weights-bytes", str(12 * GB), "--fault-wake-fails", "1")
    run(lambda: s.sleep(1, "abort"))
    with pytest.raises(WakeFailed, match="CUDA Error: out of memory") as failed:
        run(lambda: s.wake_up(None))
    assert str(failed.value) == WAKE_OOM
    assert s.sleeping and s.tags == {"weights", "kv_cache"} and s.resident == {"weights"} and not s.host_copy
    assert seconds_of(clock, lambda: s.wake_up(None)) == pytest.approx(sleep_model.WAKE_BASE_SECONDS)  # no copy now
    assert not s.sleeping


def test_a_bare_fault_flag_fails_every_wake() -> None:
    s, _ = sleeper("--enable-sleep-mode", "--fault-wake-fails")
    run(lambda: s.sleep(1, "abort"))
    for _ in range(3):
        with pytest.raises(WakeFailed):
            run(lambda: s.wake_up(None))
    assert s.sleeping


def test_reload_while_the_weights_sleep_is_refused() -> None:
    s, _ = sleeper("--enable-sleep-mode", "--weights-bytes", str(GB))
    run(lambda: s.sleep(2, "abort"))
    with pytest.raises(RuntimeError, match="wake_up"):
        run(s.reload_weights)


def test_dev_mode_is_read_as_vllm_reads_it() -> None:
    assert dev_mode({}) is False and dev_mode({"VLLM_SERVER_DEV_MODE": "0"}) is False
    assert dev_mode({"VLLM_SERVER_DEV_MODE": "1"}) is True and dev_mode({"VLLM_SERVER_DEV_MODE": "2"}) is True
    for bad in ("true", "", "yes"):
        with pytest.raises(ValueError, match="invalid literal for int"):
            dev_mode({"VLLM_SERVER_DEV_MODE": bad})


def test_sleep_flags_parse_and_refuse_a_bandwidth_of_zero(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = parse_config(["--enable-sleep-mode", "--weights-bytes", "5", "-tp", "4", "-pp", "2"])
    assert (cfg.enable_sleep_mode, cfg.weights_bytes, cfg.gpu_memory_bytes, cfg.gpus) == (True, 5, 5, 8)
    assert (cfg.fault_wake_fails, parse_config(["--fault-wake-fails", "2"]).fault_wake_fails) == (0, 2)
    assert capsys.readouterr().err == ""
    with pytest.raises(SystemExit) as exited:
        parse_config(["--sleep-host-gb-per-s", "0"])
    assert exited.value.code == 2 and "must be above 0" in capsys.readouterr().err
