"""``make down`` (scripts/down.sh): it stops the engines the appliance started and marks their deployments
stopped, keeping what is wanted of them (a serving one comes back with make up: tests/test_make_up_comes_back.py),
or keeps them with KEEP_ENGINES=1 and says which; without a database it goes by the pid files.

Real processes throughout: the engines are ``sleep`` programs started by the process runtime into a data folder
of the test's own, with a deployment and replica row in the test database that down.sh's manage.py reads.
"""

import os
import subprocess
from pathlib import Path

import pytest

from appliance.runtimes.process import ProcessRuntime
from console.catalog.models import ModelSource
from console.deployments.models import Deployment, Replica
from engines.launch import EngineKind, LaunchSpec
from tests.conftest import ROOT
from tests.gatewayworld import within

pytestmark = pytest.mark.process


def _start(runtime: ProcessRuntime, name: str) -> int:
    spec = LaunchSpec(EngineKind.SIMULATOR, ["sleep", "300"], [], {}, "127.0.0.1", 1, "k", name)
    return int(runtime.start(name, spec).handle)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _deployment_with_engine(runtime: ProcessRuntime, name: str) -> tuple[Deployment, int]:
    model = ModelSource.objects.get_or_create(name="m", kind="local", config={}, weights_bytes=1, path="/m")[0]
    dep = Deployment.objects.create(
        name=name,
        model=model,
        engine="simulator",
        served_model_name=name,
        max_model_len=1,
        kv_space_gib=1,
        plan={},
        state="ready",
        desired="serving",
    )
    engine = f"hearth-test-replica-{dep.pk}"
    pid = _start(runtime, engine)
    Replica.objects.create(
        deployment=dep,
        runtime="process",
        runtime_name=engine,
        handle=str(pid),
        host="127.0.0.1",
        port=1,
        running=True,
    )
    return dep, pid


def _down(data: Path, env: dict[str, str], keep: bool = False) -> str:
    env = {**env, "HEARTH_DATA_DIR": str(data), "PY": str(ROOT / ".venv/bin/python")}
    env.pop("KEEP_ENGINES", None)
    if keep:
        env["KEEP_ENGINES"] = "1"
    done = subprocess.run(["bash", "scripts/down.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.django_db(transaction=True)
def test_make_down_stops_the_engines_and_marks_their_deployments_stopped_still_wanted_serving(
    live_env: dict[str, str], tmp_path: Path
) -> None:
    runtime = ProcessRuntime(tmp_path / "engines")
    dep, pid = _deployment_with_engine(runtime, "smol")
    # without a model source, so that a session's worker reconciling this database does not launch it again
    # (console.deployments.restoring launches only what has a model) before its state is read here
    Deployment.objects.filter(pk=dep.pk).update(model=None)
    orphan = _start(runtime, "hearth-test-replica-999")  # no replica owns it
    out = _down(tmp_path, live_env)
    assert f"down: stopped engine smol: hearth-test-replica-{dep.pk} ({pid})" in out
    assert f"down: stopped engine no deployment (an orphan): hearth-test-replica-999 ({orphan})" in out
    within(10, lambda: not _alive(pid) and not _alive(orphan))
    dep.refresh_from_db()
    assert (dep.state, dep.desired) == ("stopped", "serving")
    assert (
        dep.state_reason == "Stopped with the appliance (make down); the worker launches it again when it is back up."
    )
    assert Replica.objects.get(deployment=dep).stopped_at is not None


@pytest.mark.django_db(transaction=True)
def test_keep_engines_leaves_them_running_and_says_which(live_env: dict[str, str], tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path / "engines")
    dep, pid = _deployment_with_engine(runtime, "kept")
    try:
        out = _down(tmp_path, live_env, keep=True)
        assert out.strip() == f"down: kept running (KEEP_ENGINES=1) kept: hearth-test-replica-{dep.pk} ({pid})"
        assert _alive(pid)
        dep.refresh_from_db()
        assert dep.state == "ready"
    finally:
        runtime.stop(f"hearth-test-replica-{dep.pk}", grace_seconds=1)


def test_without_a_database_down_goes_by_the_pid_files(tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path / "engines")
    pid = _start(runtime, "hearth-x-replica-1")
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}  # SQLite in tmp_path: not made yet
    assert _down(tmp_path, env, keep=True).strip() == f"down: kept running (KEEP_ENGINES=1) hearth-x-replica-1 ({pid})"
    assert _alive(pid)
    assert _down(tmp_path, env).strip() == f"down: stopped engine hearth-x-replica-1 ({pid})"
    within(10, lambda: not _alive(pid))
    assert not (tmp_path / "engines" / "hearth-x-replica-1.pid").exists()


def test_a_pid_file_whose_process_ended_is_named_and_removed(tmp_path: Path) -> None:
    ended = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "web.pid").write_text(ended)  # a web server that crashed, leaving its pid file
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    said = f"down: web was not running (its pid file named {ended}, which has ended or is another program's now)"
    assert _down(tmp_path, env).strip() == said
    assert not (tmp_path / "web.pid").exists()


def _running(argv0: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``sleep 300`` running as ``argv0`` (its command line), in ``env``."""
    return subprocess.Popen(["bash", "-c", f'exec -a "{argv0}" sleep 300'], env=env)


def test_a_pid_file_whose_number_is_another_programs_now_leaves_that_program_be(tmp_path: Path) -> None:
    """A trial: after a kill -9, the web server's pid was taken by another program, which make down killed."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    other = _running("unrelated-service", env)
    another_appliances = _running("python -m celery -A appliance worker", {**env, "HEARTH_DATA_DIR": "/elsewhere"})
    unmarked = {k: v for k, v in env.items() if k != "HEARTH_DATA_DIR"}  # up.sh marks all it starts with one
    no_folder = _running("celery -A appliance beat (not hearth)", unmarked)
    ours = _running("python -m appliance.web_server", {**env, "HEARTH_DATA_DIR": f"{tmp_path}/"})
    engine = _running("python -m vllm.entrypoints.openai.api_server", env)
    (tmp_path / "engines").mkdir()
    (tmp_path / "engines" / "hearth-x-replica-1.pid").write_text(str(engine.pid))
    (tmp_path / "engines" / "hearth-x-replica-1.argv").write_text('["sleep", "300"]')  # what the runtime started
    for name, proc in (("beat", other), ("worker", another_appliances), ("worker-long", no_folder), ("web", ours)):
        (tmp_path / f"{name}.pid").write_text(str(proc.pid))
    try:
        out = _down(tmp_path, env)
        assert f"down: stopped web ({ours.pid})" in out and ours.wait(10) is not None
        assert f"down: beat was not running (its pid file named {other.pid}, which has ended or is another" in out
        assert f"down: worker was not running (its pid file named {another_appliances.pid}," in out
        assert f"down: hearth-x-replica-1's pid file names {engine.pid}, no longer its engine" in out
        assert f"down: worker-long was not running (its pid file named {no_folder.pid}," in out
        assert all(p.poll() is None for p in (other, another_appliances, no_folder, engine))
    finally:
        for proc in (other, another_appliances, no_folder, ours, engine):
            proc.kill()
            proc.wait()


def test_make_down_given_a_data_folder_make_up_never_had_says_so_and_makes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "not-the-data"
    env = {"PATH": os.environ["PATH"], "HEARTH_DATA_DIR": str(missing)}
    done = subprocess.run(["bash", "scripts/down.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "give make down the HEARTH_DATA_DIR that make up had" in done.stderr
    assert not missing.exists()
