"""Two runs of an engine's set-up at once wait for each other (scripts/setup-vllm-cpu.sh, setup-sglang-cpu.sh): a
trial's `make up` beside another's removed the other's half-built vLLM venv (`rm -rf` of a folder pip was writing).
Here the cache is a test folder whose venv and model are already built, so each run only takes the lock."""

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.process


@pytest.mark.parametrize("script", ["setup-vllm-cpu", "setup-sglang-cpu"])
def test_a_second_setup_waits_for_the_first(tmp_path: Path, script: str) -> None:
    for built in ("venv-vllm-cpu", "venv-sglang-cpu", "models/SmolLM2-135M-Instruct"):
        (tmp_path / built).mkdir(parents=True)
        (tmp_path / built / ".hearth-ok").touch()
    env = {**os.environ, "HEARTH_CACHE_DIR": str(tmp_path)}
    with open(tmp_path / f".{script}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the first run, installing
        second = subprocess.Popen(
            ["bash", ROOT / "scripts" / f"{script}.sh"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert second.stdout is not None
        said = second.stdout.readline().decode()
        assert f"{script}: another install into {tmp_path} is under way; waiting for it to finish" in said
        time.sleep(0.5)
        assert second.poll() is None  # still waiting, having touched nothing
    out, _ = second.communicate(timeout=60)
    assert second.returncode == 0 and "engine python" in out.decode()
    assert (tmp_path / "venv-vllm-cpu" / ".hearth-ok").exists()
