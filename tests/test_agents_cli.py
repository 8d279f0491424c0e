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
import re
import shlex
import time
from pathlib import Path

import pytest

from console.deployments.agent_settings import agent_settings
from console.observability.models import RequestLog
from tests.agentworld import CONTEXT, NPM_BIN, TASK, Agents, agents, assert_copied, cli, run, workdir

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["agents"]  # the fixture, used by name


def claude(
    agents: Agents,
    model: str,
    tmp_path: Path,
    task: str = TASK,
    options: tuple[str, ...] = ("--allowedTools", "Read,Write"),
    context: int = CONTEXT,
    **settings: str,
) -> tuple[Path, str]:
    """Claude Code run with ``-p task`` and ``options``, in the environment the deployment page's block sets for a
    deployment of ``context`` tokens (its ``export`` lines) with the test's key; ``settings`` are more of it."""
    work, home = workdir(tmp_path), tmp_path / "home"
    home.mkdir()
    block = agent_settings(agents.web, model, context)[0].text
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        **exported(block),
        "ANTHROPIC_AUTH_TOKEN": agents.key,
        "ANTHROPIC_API_KEY": "sk-ant-api03-not-a-hearth-key",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        **settings,
    }
    argv = [
        cli(NPM_BIN / "claude"),
        "-p",
        task,
        *options,
        "--output-format",
        "stream-json",
        "--verbose",
    ]
    return work, run(argv, work, env)


def exported(block: str) -> dict[str, str]:
    """The variables a shell block's ``export`` lines set."""
    found: dict[str, str] = {}
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"]:
            found |= dict(word.split("=", 1) for word in words[1:])
    return found


def codex(agents: Agents, model: str, tmp_path: Path, task: str = TASK) -> tuple[Path, str]:
    """Codex with the deployment page's settings (console.deployments.agent_settings, CONTEXT as the deployment's
    max_model_len) and no retries, in a throwaway HOME (tmp_path/home)."""
    work, home = workdir(tmp_path), tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    settings = agent_settings(agents.web, model, CONTEXT)[1].text  # the provider's table is the block's last
    (home / ".codex/config.toml").write_text(settings + "\nrequest_max_retries = 0\nstream_max_retries = 0\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "HEARTH_API_KEY": agents.key}
    argv = [cli(NPM_BIN / "codex"), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", task]
    return work, run(argv, work, env)


def answered(model: str) -> list[int]:
    """The statuses of the requests the request log holds for ``model``, once its rows have come (a few seconds)."""
    deadline = time.monotonic() + 15
    while not RequestLog.objects.filter(model=model).exists() and time.monotonic() < deadline:
        time.sleep(0.3)
    return sorted(set(RequestLog.objects.filter(model=model).values_list("status", flat=True)))


def test_claude_code_with_both_keys_set_reads_and_writes_a_file_through_hearth(agents: Agents, tmp_path: Path) -> None:
    work, output = claude(agents, agents.deploy("agent", []), tmp_path)
    assert_copied(work, output)
    assert '"is_error":false' in output.replace(" ", "")
    assert "assumes a context window" not in output  # the block told it the context (else: "… of 1m tokens")
    # none refused: its environment, a role "system" message, is taken as vLLM takes it (a 400 made it drop it)
    assert answered("agent") == [200]


def test_codex_over_the_responses_api_reads_and_writes_a_file_through_hearth(agents: Agents, tmp_path: Path) -> None:
    """Codex takes the context the settings tell it: its session log counts 95 % of it (Codex 0.169)."""
    work, output = codex(agents, agents.deploy("agent-responses", []), tmp_path)
    assert_copied(work, output)
    [session] = (tmp_path / "home/.codex/sessions").rglob("rollout-*.jsonl")
    windows = set(re.findall(r'"model_context_window":(\d+)', session.read_text()))
    assert windows == {str(CONTEXT * 95 // 100)}, windows


def test_codex_works_through_the_translation_for_an_engine_without_responses(agents: Agents, tmp_path: Path) -> None:
    work, output = codex(agents, agents.deploy("agent-chat", ["--no-responses"]), tmp_path)
    assert_copied(work, output)


def test_claude_code_works_through_the_translation_for_an_engine_without_messages(
    agents: Agents, tmp_path: Path
) -> None:
    work, output = claude(agents, agents.deploy("agent-openai", ["--no-anthropic"]), tmp_path)
    assert_copied(work, output)


def test_codex_with_a_model_from_its_catalog_writes_the_file_with_apply_patch(agents: Agents, tmp_path: Path) -> None:
    """Served as gpt-5.5, a model in Codex 0.169's own catalog, Codex offers its freeform apply_patch tool and the
    simulator writes with it (a patch's added file ends with a newline; a shell's printf would not add one)."""
    work, output = codex(agents, agents.deploy("gpt-5.5", []), tmp_path)
    assert_copied(work, output, ending="\n")
