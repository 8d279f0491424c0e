"""The process runtime: real subprocesses started, watched, logged and stopped."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.runtimes import RuntimeError_
from appliance.runtimes.process import ProcessRuntime
from engines.launch import EngineKind, LaunchSpec
from tests.gatewayworld import within

pytestmark = pytest.mark.process


def spec(code: str) -> LaunchSpec:
    return LaunchSpec(
        engine=EngineKind.VLLM_CPU,
        program=[sys.executable, "-c", code],
        args=[],
        env={"GREETING": "hello"},
        host="127.0.0.1",
        port=1,
        api_key="k",
        served_model_name="m",
    )


def wait_until_stopped(runtime: ProcessRuntime, name: str) -> None:
    deadline = time.monotonic() + 10
    while runtime.status(name).running and time.monotonic() < deadline:
        time.sleep(0.05)


def test_it_runs_logs_and_stops_an_engine_and_its_children(tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path)
    code = (
        "import os, subprocess, sys, time; print(os.environ['GREETING'], flush=True); "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    )
    pid = int(runtime.start("r1", spec(code)).handle)
    within(10, lambda: "hello" in runtime.logs("r1"))
    assert runtime.status("r1").running
    status = runtime.stop("r1", grace_seconds=2)
    assert not status.running and not runtime.status("r1").running
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_it_reports_the_exit_code_of_an_engine_that_died(tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path)
    runtime.start("r2", spec("import sys; print('boom', file=sys.stderr); sys.exit(3)"))
    wait_until_stopped(runtime, "r2")
    status = runtime.status("r2")
    assert (status.running, status.exit_code, status.oom_killed) == (False, 3, False)
    assert "boom" in runtime.logs("r2")


class SlowReaper(ProcessRuntime):
    """Its reaper writes an ended engine's code half a second after the engine is gone, as a busy box may."""

    def _reap(self, proc: subprocess.Popen[bytes], name: str) -> None:
        proc.wait()
        time.sleep(0.5)
        super()._reap(proc, name)


def test_an_engine_read_between_its_end_and_its_reaper_has_its_exit_code(tmp_path: Path) -> None:
    """CI read an engine that had died while its reaper had not written the code yet: running False, exit code
    None (the Log tab's "exit code unknown"). The status waits for the reaper of an engine this process started."""
    runtime = SlowReaper(tmp_path)
    pid = int(runtime.start("r3", spec("import sys; sys.exit(3)")).handle)
    within(10, lambda: not Path(f"/proc/{pid}").exists())  # reaped, its code not written for another half second
    assert not (tmp_path / "r3.exit").exists()
    status = runtime.status("r3")
    assert (status.running, status.exit_code) == (False, 3)


def test_a_name_never_started_is_not_running(tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path)
    assert runtime.status("ghost") == runtime.stop("ghost")
    assert runtime.logs("ghost") == ""


def test_a_missing_program_is_a_clear_error(tmp_path: Path) -> None:
    bad = LaunchSpec(
        engine=EngineKind.VLLM_CPU,
        program=[str(tmp_path / "no-such-python")],
        args=[],
        env={},
        host="127.0.0.1",
        port=1,
        api_key="k",
        served_model_name="m",
    )
    with pytest.raises(RuntimeError_, match="could not start"):
        ProcessRuntime(tmp_path).start("r3", bad)


def test_stop_ends_children_the_engine_left_behind_when_it_died(tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path)
    code = (
        "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']); "
        "print(p.pid, flush=True)"
    )  # the leader exits at once; its child ignores SIGTERM, like vLLM's EngineCore
    runtime.start("r4", spec(code))
    wait_until_stopped(runtime, "r4")
    within(10, lambda: runtime.logs("r4").strip() != "")
    child = int(runtime.logs("r4").split()[0])
    assert Path(f"/proc/{child}").exists()
    runtime.stop("r4", grace_seconds=0.5)
    assert not Path(f"/proc/{child}").exists() or Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"


def test_a_name_started_again_gets_a_fresh_log_and_keeps_the_last_one_apart(tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path)
    for word in ("first", "second"):
        runtime.start("r5", spec(f"print('{word}')"))
        wait_until_stopped(runtime, "r5")
        time.sleep(0.1)
    assert runtime.logs("r5").strip() == "second"
    assert (tmp_path / "r5.previous.log").read_text().strip() == "first"


def test_a_running_engine_is_adopted_only_when_it_runs_what_was_asked(tmp_path: Path) -> None:
    """A worker that died after a start finds its engine again; the same name from another life (a reset
    database reuses replica ids) is ended and started afresh, never taken for the engine asked for."""
    runtime = ProcessRuntime(tmp_path)
    first = int(runtime.start("r1", spec("import time; time.sleep(60)")).handle)
    assert int(ProcessRuntime(tmp_path).start("r1", spec("import time; time.sleep(60)")).handle) == first
    other = int(ProcessRuntime(tmp_path).start("r1", spec("import time; time.sleep(61)")).handle)
    try:
        assert other != first and runtime.status("r1").running
        assert not Path(f"/proc/{first}").exists() or Path(f"/proc/{first}/stat").read_text().split()[2] == "Z"
    finally:
        runtime.stop("r1", grace_seconds=2)


def test_a_recycled_pid_that_is_not_ours_is_neither_adopted_nor_ended(tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(62)"], start_new_session=True)
    try:
        (tmp_path / "r1.pid").write_text(str(stranger.pid))  # a stale pid file whose pid another process has now
        started = int(runtime.start("r1", spec("import time; time.sleep(60)")).handle)
        assert started != stranger.pid and stranger.poll() is None
    finally:
        runtime.stop("r1", grace_seconds=2)
        stranger.kill()
        stranger.wait()


def test_it_lists_only_its_own_appliances_engines(tmp_path: Path) -> None:
    """Two appliances sharing a data folder: reconcile removes the engines no replica owns among its own
    names only, never the other's."""
    for name in ("hearth-aaaaaa-replica-1", "hearth-bbbbbb-replica-1"):
        (tmp_path / f"{name}.pid").write_text("1")
    assert ProcessRuntime(tmp_path, prefix="hearth-aaaaaa-").names() == {"hearth-aaaaaa-replica-1"}
