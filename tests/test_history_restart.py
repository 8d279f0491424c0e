"""The metric history survives `make down` and `make up`: scripts/up.sh and scripts/down.sh (what the Makefile
runs) with their default SQLite database in a fresh data folder, a simulator deployment scraped, the appliance
taken down and brought up again, and the charts still holding the points from before."""

import os
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import ROOT, free_port, login

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]
LLAMA = ROOT / "console" / "catalog" / "demo" / "llama-3.1-8b-instruct.json"
SETUP = f"""
import json
from django.contrib.auth.models import User
from console.catalog.models import ModelSource
User.objects.create_superuser("admin", "", "admin-password-1")
ModelSource.objects.create(name="llama-8b", kind="hf", repo_id="meta-llama/Llama-3.1-8B-Instruct",
    revision="0e9e39f249a16976918f6564b8830bc894c89659", config=json.loads(open({str(LLAMA)!r}).read())["config"],
    weights_bytes=16_060_522_496)
"""


def run(script: str, env: dict[str, str]) -> str:
    # 240 s, as tests/test_make_up_comes_back.py allows: a second up.sh on a 2-core box at load 12 took over 120
    done = subprocess.run(["bash", f"scripts/{script}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_history_survives_make_down_and_make_up(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "SECRET_KEY", "HEARTH_INSTANCE"}}
    env.update(
        {
            "HEARTH_DATA_DIR": str(tmp_path),
            "HEARTH_PORT": str(port),
            "REDIS_URL": settings.REDIS_URL,
            "HEARTH_GPU_INVENTORY": "sim:8xH100-80GB",
            "PY": str(ROOT / ".venv" / "bin" / "python"),
        }
    )
    base = f"http://127.0.0.1:{port}"
    run("up.sh", env)
    try:
        shell = {**env, "SECRET_KEY_FILE": str(tmp_path / "secret_key")}
        subprocess.run([env["PY"], "manage.py", "shell", "-c", SETUP], cwd=ROOT, env=shell, check=True)
        client = login(base)
        dep = client.post(
            "/api/deployments", json={"name": "kept", "model": "llama-8b", "engine": "simulator", "max_model_len": 8192}
        ).json()
        assert client.post(f"/api/deployments/{dep['id']}/launch").status_code == 202
        deadline = time.monotonic() + 60
        while len((before := client.get(f"/deployments/{dep['id']}/series/?range=1h").json())["t"]) < 4:
            assert time.monotonic() < deadline, (tmp_path / "logs" / "worker.log").read_text()[-3000:]
            time.sleep(0.5)
        run("down.sh", env)
        run("up.sh", env)
        client = login(base)
        after = client.get(f"/deployments/{dep['id']}/series/?range=1h").json()
        assert set(before["t"]) <= set(after["t"])  # every point from before the restart is still there
        kv = dict(zip(after["t"], after["series"]["kv_cache_usage"], strict=True))
        pairs = list(zip(before["t"], before["series"]["kv_cache_usage"], strict=True))[:-1]  # the last slot may grow
        assert all(kv[t] == v for t, v in pairs)
        # make down stopped the engine it had started (KEEP_ENGINES unset) and kept the deployment wanted serving:
        # make up launches it again (tests/test_make_up_comes_back.py)
        deadline = time.monotonic() + 60
        while (again := client.get(f"/api/deployments/{dep['id']}").json())["state"] == "stopped":
            assert time.monotonic() < deadline, again
            time.sleep(0.3)
        assert again["desired"] == "serving", again
    finally:
        run("down.sh", env)
