"""The real Claude Code and Codex CLIs (from npm, scripts/install-agent-clis.sh) through Hearth against the engine
simulator's agent mode, which does the file task they are given with their own tools. Each test checks the
task's end state, the file the agent wrote and its content, not what the agent said.

Claude Code runs with both ANTHROPIC_AUTH_TOKEN (the Hearth key, sent as ``Authorization: Bearer``) and
ANTHROPIC_API_KEY (some other key, sent as ``x-api-key``) set, a common setup that used to be refused 401;
Codex over the Responses API, natively (the simulator serves /v1/responses) and through the gateway's
translation to chat completions (``--no-responses``). Non-essential traffic off, a throwaway HOME each
(the project's measured facts, FACTS.md: "Real coding-agent clients").
"""

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Proc, login
from tests.simworld import ensure_model, wait_state

pytestmark = pytest.mark.django_db(transaction=True)
NPM_BIN = Path(os.environ.get("HEARTH_CACHE_DIR", Path.home() / ".cache/hearth")) / "npm/bin"
SOURCE = "The answer is <<forty two apples>> today.\n"
TASK = "copy source.txt to answer.txt"
CONTEXT = 65536  # Claude Code's first request needs ~45K tokens (FACTS.md); Llama 3.1 8B takes 128K


def cli(name: str) -> str:
    path = NPM_BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/install-agent-clis.sh (make test's services step does)")
    return str(path)


class Agents:
    """Deployments of the simulator, one per API shape the agents are tried with, and a key for them."""

    def __init__(self, web: str, client: httpx.Client) -> None:
        self.web, self.client, self.ids = web, client, []
        self.key = client.post("/api/keys", json={"name": "agents"}).json()["key"]

    def deploy(self, name: str, extra_args: list[str]) -> str:
        ensure_model()
        body = {
            "name": name,
            "model": "llama-8b",
            "engine": "simulator",
            "max_model_len": CONTEXT,
            "extra_args": extra_args,
        }
        resp = self.client.post("/api/deployments", json=body)
        assert resp.status_code == 201, resp.text
        dep_id = resp.json()["id"]
        self.ids.append(dep_id)
        assert self.client.post(f"/api/deployments/{dep_id}/launch").status_code == 202
        assert wait_state(self.client, dep_id, {"ready", "failed"})["state"] == "ready"
        return name


@pytest.fixture
def agents(web: str, worker: Proc, admin_user: object) -> Iterator[Agents]:
    world = Agents(web, login(web))
    yield world
    for dep_id in world.ids:
        world.client.post(f"/api/deployments/{dep_id}/stop")
    for dep_id in world.ids:
        wait_state(world.client, dep_id, {"stopped", "failed"})


def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "source.txt").write_text(SOURCE)
    return work


def run(argv: list[str], work: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        argv, cwd=work, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL
    )
    return f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def claude(agents: Agents, model: str, tmp_path: Path) -> tuple[Path, str]:
    work, home = workdir(tmp_path), tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": agents.web,
        "ANTHROPIC_AUTH_TOKEN": agents.key,
        "ANTHROPIC_API_KEY": "sk-ant-api03-not-a-hearth-key",
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    argv = [cli("claude"), "-p", TASK, "--allowedTools", "Read,Write", "--output-format", "stream-json", "--verbose"]
    return work, run(argv, work, env)


def codex(agents: Agents, model: str, tmp_path: Path) -> tuple[Path, str]:
    work, home = workdir(tmp_path), tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex/config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "hearth"\n\n[model_providers.hearth]\nname = "Hearth"\n'
        f'base_url = "{agents.web}/v1"\nenv_key = "HEARTH_API_KEY"\nwire_api = "responses"\n'
        "request_max_retries = 0\nstream_max_retries = 0\n"
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "HEARTH_API_KEY": agents.key}
    argv = [cli("codex"), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", TASK]
    return work, run(argv, work, env)


def assert_copied(work: Path, output: str) -> None:
    answer = work / "answer.txt"
    assert answer.exists(), output
    assert answer.read_text() == "forty two apples", output


def test_claude_code_with_both_keys_set_reads_and_writes_a_file_through_hearth(agents: Agents, tmp_path: Path) -> None:
    work, output = claude(agents, agents.deploy("agent", []), tmp_path)
    assert_copied(work, output)
    assert '"is_error":false' in output.replace(" ", "")


def test_codex_over_the_responses_api_reads_and_writes_a_file_through_hearth(agents: Agents, tmp_path: Path) -> None:
    work, output = codex(agents, agents.deploy("agent-responses", []), tmp_path)
    assert_copied(work, output)


def test_codex_works_through_the_translation_for_an_engine_without_responses(agents: Agents, tmp_path: Path) -> None:
    work, output = codex(agents, agents.deploy("agent-chat", ["--no-responses"]), tmp_path)
    assert_copied(work, output)


def test_claude_code_works_through_the_translation_for_an_engine_without_messages(
    agents: Agents, tmp_path: Path
) -> None:
    work, output = claude(agents, agents.deploy("agent-openai", ["--no-anthropic"]), tmp_path)
    assert_copied(work, output)
