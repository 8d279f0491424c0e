"""Issue 28's acceptance, with real processes: a serving deployment, `make down` and `make up` (scripts/down.sh and
scripts/up.sh, as the Makefile runs them, on their default SQLite in a data folder of the test's own), and it is
serving again without a click, while one an admin stopped stays stopped; a request that arrives while the appliance
comes back is held and served, never a 5xx; after a "reboot" (every process of the appliance and its engines killed
with SIGKILL) it serves again too; and a `make up` that fails (its port taken) leaves nothing of its own running.
Simulator deployments on the simulated 8x H100, so no real engine is needed."""

import contextlib
import os
import re
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from tests.conftest import ROOT, free_port, login

pytestmark = pytest.mark.process
RECONCILED = re.compile(r"console\.deployments\.tasks\.reconcile\[[^\]]+\] succeeded")
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


def script(name: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["bash", f"scripts/{name}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert not check or done.returncode == 0, done.stdout + done.stderr
    return done


def environment(data: Path, port: int, redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "SECRET_KEY", "HEARTH_INSTANCE"}}
    return env | {
        "HEARTH_DATA_DIR": str(data),
        "HEARTH_PORT": str(port),
        "REDIS_URL": redis_url,
        "HEARTH_GPU_INVENTORY": "sim:8xH100-80GB",
        "HEARTH_RESTART_BACKOFF": "1",  # a crashed (here: rebooted) engine restarts after 1 s, not 10
        "HEARTH_DRAIN_SECONDS": "2",  # make down waits this long for open streams (there are none)
        "PY": str(ROOT / ".venv" / "bin" / "python"),
    }


def wait_state(client: httpx.Client, dep_id: int, state: str, within: float, log: Path) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while (dep := client.get(f"/api/deployments/{dep_id}").json())["state"] != state:
        assert time.monotonic() < deadline, (dep, log.read_text()[-3000:])
        time.sleep(0.3)
    return dep  # type: ignore[no-any-return]


def ask(base: str, key: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    return httpx.post(f"{base}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def processes_of(data: Path) -> list[int]:
    """Live processes started with HEARTH_DATA_DIR=``data`` in their environment (what up.sh starts carries it)."""
    needle = f"HEARTH_DATA_DIR={data}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            state = (environ.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if needle in environ.read_bytes().split(b"\0") and state != "Z":
                found.append(int(environ.parent.name))
        except (OSError, IndexError):
            continue
    return found


class Appliance:
    """An appliance brought up by up.sh in ``data``, with an admin, two ready simulator deployments ("back" and
    "kept-down") and a key."""

    def __init__(self, data: Path) -> None:
        self.data, self.port = data, free_port()
        self.env = environment(data, self.port, settings.REDIS_URL)
        self.base = f"http://127.0.0.1:{self.port}"
        said = script("up.sh", self.env).stdout
        assert f"Database: SQLite in {data}. Redis: 127.0.0.1:" in said, said  # where its state lives
        assert f"Stop: HEARTH_DATA_DIR={data} make down\n" in said, said  # its own folder, not ./data
        shell = {**self.env, "SECRET_KEY_FILE": str(data / "secret_key")}
        subprocess.run([self.env["PY"], "manage.py", "shell", "-c", SETUP], cwd=ROOT, env=shell, check=True)
        self.client = login(self.base)
        self.ids = {name: self.deploy(name) for name in ("back", "kept-down")}
        for dep_id in self.ids.values():
            wait_state(self.client, dep_id, "ready", 60, self.worker_log)
        self.key = self.client.post("/api/keys", json={"name": "restart"}).json()["key"]

    @property
    def worker_log(self) -> Path:
        return self.data / "logs" / "worker.log"

    def deploy(self, name: str) -> int:
        body = {"name": name, "model": "llama-8b", "engine": "simulator", "max_model_len": 8192}
        dep_id: int = self.client.post("/api/deployments", json=body).json()["id"]
        assert self.client.post(f"/api/deployments/{dep_id}/launch").status_code == 202
        return dep_id

    def state(self, name: str) -> dict[str, Any]:
        return self.client.get(f"/api/deployments/{self.ids[name]}").json()  # type: ignore[no-any-return]

    def held_and_served(self, model: str, within: float = 30) -> bool:
        """Whether the request log (rows are spooled, then written within seconds) comes to hold a request for
        ``model`` answered 200 after it was held for a wake (``woke_engine``), within ``within`` seconds."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with contextlib.closing(sqlite3.connect(self.data / "hearth.sqlite3", timeout=10)) as db:
                found = db.execute(
                    "SELECT 1 FROM observability_requestlog WHERE model = ? AND status = 200 AND woke_engine",
                    (model,),
                ).fetchall()
            if found:
                return True
            time.sleep(0.3)
        return False

    def reconciled_since(self, offset: int, within: float = 30) -> None:
        """Wait until the worker's log, from ``offset`` bytes on, shows a reconcile done."""
        deadline = time.monotonic() + within
        while not RECONCILED.search(text := self.worker_log.read_bytes()[offset:].decode(errors="replace")):
            assert time.monotonic() < deadline, text[-3000:]
            time.sleep(0.3)


def answers_once_back(app: "Appliance", model: str, within: float = 90) -> dict[str, Any]:
    """Ask for ``model`` until it answers 200; every answer before is a 503 with Retry-After in the API's shape,
    never another 5xx. Returns its deployment then."""
    before: list[tuple[int, str | None, str]] = []
    deadline = time.monotonic() + within
    while (answer := ask(app.base, app.key, model)).status_code != 200:
        before.append((answer.status_code, answer.headers.get("retry-after"), answer.json()["error"]["code"]))
        assert time.monotonic() < deadline, (before, app.worker_log.read_text()[-3000:])
        time.sleep(0.3)
    assert all(status == 503 and retry for status, retry, _ in before), before
    return app.state(model)


@pytest.fixture(scope="module")
def appliance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    data = tmp_path_factory.mktemp("comes-back")
    env = environment(data, 0, settings.REDIS_URL)
    try:
        yield Appliance(data)
    finally:
        subprocess.run(["bash", "scripts/down.sh"], cwd=ROOT, env=env, capture_output=True, check=False)


def test_make_down_then_make_up_serves_again_without_a_click_and_an_admin_stop_stays(appliance: Appliance) -> None:
    app = appliance
    assert app.client.post(f"/api/deployments/{app.ids['kept-down']}/stop").status_code == 202
    wait_state(app.client, app.ids["kept-down"], "stopped", 30, app.worker_log)
    assert ask(app.base, app.key, "back").status_code == 200
    down = script("down.sh", app.env).stdout
    engines = [line.removeprefix("down: stopped engine ") for line in down.splitlines() if "stopped engine" in line]
    ended = [line.split(":")[0] for line in engines]
    assert ended == ["back"], down  # "kept-down" had no engine left to end

    # make up again; a request for "back" is sent as soon as the console answers (the worker starts after it)
    up = subprocess.Popen(["bash", "scripts/up.sh"], cwd=ROOT, env=app.env, stdout=subprocess.PIPE, text=True)
    offset = app.worker_log.stat().st_size
    deadline = time.monotonic() + 240  # as long as up.sh is given below: 120 s ran out on a 2-core box at load 10
    while True:
        assert up.poll() is None or up.returncode == 0, up.stdout.read() if up.stdout else ""
        try:
            if httpx.get(f"{app.base}/login/", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.1)
    early: list[httpx.Response] = []
    held = threading.Thread(target=lambda: early.append(ask(app.base, app.key, "back")))
    held.start()
    refused = ask(app.base, app.key, "kept-down")
    assert up.wait(240) == 0
    held.join(150)
    said = up.stdout.read() if up.stdout else ""
    # up.sh names what launches again while it still loads (it may be ready by then); an admin's stop, never
    coming = [line for line in said.splitlines() if line.startswith("Launching again what served before:")]
    assert all("back (" in line and "kept-down" not in line for line in coming), said

    # held for its launch (as for a wake) and answered; or, had the worker's reconcile launched it first, 503
    # with Retry-After while it loads
    assert early, "the request sent while the appliance came up got no answer"
    if early[0].status_code == 200:
        assert early[0].json()["choices"][0]["message"]["content"]
        assert app.held_and_served("back"), "the request log has no request held for the launch"
    else:
        assert early[0].status_code == 503 and early[0].headers.get("retry-after"), early[0].text
    assert answers_once_back(app, "back")["desired"] == "serving"
    # an admin's stop holds across the restart: refused at once (no wake), and no reconcile launches it
    assert refused.status_code == 503 and refused.headers.get("retry-after") is None, refused.text
    assert refused.json()["error"]["code"] == "no_ready_replica"
    app.reconciled_since(offset)
    kept = app.state("kept-down")
    assert (kept["state"], kept["desired"]) == ("stopped", "stopped"), kept
    models = httpx.get(f"{app.base}/v1/models", headers={"Authorization": f"Bearer {app.key}"}).json()["data"]
    assert "back" in {m["id"] for m in models}


def test_after_a_reboot_it_serves_again_and_an_admin_stop_stays(appliance: Appliance) -> None:
    app = appliance
    wait_state(app.client, app.ids["back"], "ready", 60, app.worker_log)
    if app.state("kept-down")["state"] != "stopped":  # this test alone: the admin stops it here
        assert app.client.post(f"/api/deployments/{app.ids['kept-down']}/stop").status_code == 202
        wait_state(app.client, app.ids["kept-down"], "stopped", 30, app.worker_log)
    engines = [int(p.read_text()) for p in (app.data / "engines").glob("*.pid")]
    assert engines, "no engine runs"
    for pid in processes_of(app.data):  # a power cut: nothing stops cleanly
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in engines:  # each engine is its own process group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while processes_of(app.data):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    offset = app.worker_log.stat().st_size
    script("up.sh", app.env)
    app.client = login(app.base)
    back = answers_once_back(app, "back")
    running = [r for r in back["replicas"] if r["running"]]
    assert (back["state"], back["desired"], [r["restarts"] for r in running]) == ("ready", "serving", [1]), back
    app.reconciled_since(offset)
    kept = app.state("kept-down")
    assert (kept["state"], kept["desired"]) == ("stopped", "stopped"), kept


def test_a_make_up_that_fails_stops_what_it_started(tmp_path: Path) -> None:
    """The port is another program's, one that answers HTTP: a trial's make up said "Hearth is up" on its answer."""
    redis_port = free_port()
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as taken:  # answers 501 to a GET
        threading.Thread(target=taken.serve_forever, daemon=True).start()
        port = taken.server_address[1]
        # its own Redis too (a free port: up.sh starts redis-server), which the failure must stop as well
        env = environment(tmp_path, port, f"redis://127.0.0.1:{redis_port}/0")
        done = script("up.sh", env, check=False)
        taken.shutdown()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Hearth is up" not in done.stdout
    assert f"up: port {port} is taken by another program; set HEARTH_PORT to use another" in done.stderr
    assert "up: failed; stopping what this run started" in done.stderr
    assert "starting redis-server" in done.stdout
    assert processes_of(tmp_path) == []  # no web server, worker or beat left
    assert sorted(p.name for p in tmp_path.glob("*.pid")) == []
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", redis_port), timeout=5):
        pass  # redis-server (which rewrites its environment, so processes_of misses it) is gone too
