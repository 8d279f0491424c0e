"""The world of the real coding-agent CLI tests (tests/test_agents_cli.py, tests/test_agents_other_cli.py): the CLIs
scripts/install-agent-clis.sh installed, deployments of the engine simulator to point them at, and a working
folder holding the file their task copies. Each test checks the task's end state, not what the agent said."""

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Workers, login
from tests.simworld import ensure_model, wait_state

CACHE = Path(os.environ.get("HEARTH_CACHE_DIR", Path.home() / ".cache/hearth"))
NPM_BIN = CACHE / "npm/bin"
SOURCE = "The answer is <<forty two apples>> today.\n"
TASK = "copy source.txt to answer.txt"
CONTEXT = 65536  # Claude Code's first request needs ~45K tokens (FACTS.md); Llama 3.1 8B takes 128K
RUN_SECONDS = 240  # a CLI still running then is killed and the test fails with what it printed


def cli(path: Path) -> str:
    """``path`` as an argv[0], or the test fails saying how to install it."""
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/install-agent-clis.sh (make test's services step does)")
    return str(path)


class Agents:
    """Deployments of the simulator, one per API shape the agents are tried with, and a key for them."""

    def __init__(self, web: str, client: httpx.Client, **key_fields: Any) -> None:
        """``key_fields`` go to the key as they are (``max_tokens_cap``)."""
        self.web, self.client = web, client
        self.ids: list[int] = []
        self.key = client.post("/api/keys", json={"name": "agents", **key_fields}).json()["key"]

    def deploy(self, name: str, extra_args: list[str], context: int = CONTEXT, **fields: Any) -> str:
        """Launch the simulator as ``name`` with ``extra_args`` and a context of ``context`` tokens; its name once
        ready. ``fields`` go to the deployment as they are (``fit_max_tokens``)."""
        ensure_model()
        body = {
            "name": name,
            "model": "llama-8b",
            "engine": "simulator",
            "max_model_len": context,
            "extra_args": extra_args,
            **fields,
        }
        resp = self.client.post("/api/deployments", json=body)
        assert resp.status_code == 201, resp.text
        dep_id = resp.json()["id"]
        self.ids.append(dep_id)
        assert self.client.post(f"/api/deployments/{dep_id}/launch").status_code == 202
        assert wait_state(self.client, dep_id, {"ready", "failed"})["state"] == "ready"
        return name


@pytest.fixture
def agents(web: str, worker: Workers, admin_user: object) -> Iterator[Agents]:
    world = Agents(web, login(web))
    yield world
    for dep_id in world.ids:
        world.client.post(f"/api/deployments/{dep_id}/stop")
    for dep_id in world.ids:
        wait_state(world.client, dep_id, {"stopped", "failed"})


def workdir(tmp_path: Path) -> Path:
    """A working folder holding source.txt, the task's input."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "source.txt").write_text(SOURCE)
    return work


def run(argv: list[str], work: Path, env: dict[str, str], seconds: int = RUN_SECONDS) -> str:
    """Run a CLI in ``work`` with only ``env`` (no input); its exit status and the ends of its output."""
    done = subprocess.run(
        argv, cwd=work, env=env, capture_output=True, text=True, timeout=seconds, stdin=subprocess.DEVNULL
    )
    return f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def assert_copied(work: Path, output: str, ending: str = "") -> None:
    """answer.txt holds the marked part of source.txt, then ``ending`` (aider ends a file it writes with a newline)."""
    answer = work / "answer.txt"
    assert answer.exists(), output
    assert answer.read_text() == "forty two apples" + ending, output
