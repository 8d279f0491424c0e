"""The real OpenCode, Continue (``cn``), ``llm`` and aider CLIs (scripts/install-agent-clis.sh: npm and PyPI, pinned)
through Hearth against the engine simulator's agent mode, each with the provider settings a user gives it. The
simulator calls the tools each one sent under their own names and schemas (engines/simulator/agent_tools.py);
aider sends none and gets its whole-file format (engines/simulator/agent_listing.py). Each test checks the end
state of the files. A throwaway HOME each; nothing reaches outside the machine (OpenCode's models.dev fetch off).
"""

import json
import os
from pathlib import Path

import pytest

from tests.agentworld import CACHE, CONTEXT, NPM_BIN, TASK, Agents, agents, assert_copied, cli, run, workdir

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["agents"]  # the fixture, used by name
LLM_TOOLS = '''
def read_text(filename: str) -> str:
    """Return the text of a file."""
    with open(filename) as f:
        return f.read()


def write_text(filename: str, text: str) -> str:
    """Write text to a file, replacing what it held."""
    with open(filename, "w") as f:
        f.write(text)
    return f"wrote {len(text)} characters to {filename}"
'''


def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def opencode(agents: Agents, model: str, tmp_path: Path, limit: dict[str, int] | None) -> tuple[Path, str]:
    """OpenCode with Hearth as an OpenAI-compatible provider; ``limit`` is the model's ``context`` and ``output``
    tokens as OpenCode is told them (None: not told, so it asks for 32,000 output tokens and never compacts)."""
    work, config = workdir(tmp_path), home(tmp_path) / "opencode.json"
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Hearth",
        "options": {"baseURL": f"{agents.web}/v1", "apiKey": "{env:HEARTH_API_KEY}"},
        "models": {model: {"name": model} | ({"limit": limit} if limit else {})},
    }
    settings = {"provider": {"hearth": provider}, "model": f"hearth/{model}", "autoupdate": False, "share": "disabled"}
    config.write_text(json.dumps(settings))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(config.parent),
        "HEARTH_API_KEY": agents.key,
        "OPENCODE_CONFIG": str(config),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    }
    return work, run([cli(NPM_BIN / "opencode"), "run", TASK], work, env, seconds=120)


def test_opencode_copies_a_file_with_its_own_lowercase_tools(agents: Agents, tmp_path: Path) -> None:
    work, output = opencode(agents, agents.deploy("opencode", []), tmp_path, {"context": CONTEXT, "output": 4096})
    assert_copied(work, output)


def continue_cli(agents: Agents, model: str, tmp_path: Path, task: str) -> tuple[Path, str]:
    """Continue's ``cn`` with Hearth as an OpenAI provider, headless, its tools allowed (``--auto``)."""
    work, config = workdir(tmp_path), home(tmp_path) / "config.yaml"
    config.write_text(
        "name: Hearth\nversion: 1.0.0\nschema: v1\nmodels:\n"
        f"  - name: {model}\n    provider: openai\n    model: {model}\n    apiBase: {agents.web}/v1\n"
        f"    apiKey: {agents.key}\n    roles: [chat, edit, apply]\n    capabilities: [tool_use]\n"
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(config.parent)}
    try:
        return work, run([cli(NPM_BIN / "cn"), "-p", task, "--config", str(config), "--auto"], work, env)
    finally:  # the client's own file, holding the key: tests/test_secrets_kept.py reads every file the run left
        config.unlink()


def test_continue_cli_copies_a_file_with_its_filepath_tools(agents: Agents, tmp_path: Path) -> None:
    work, output = continue_cli(agents, agents.deploy("continue", []), tmp_path, TASK)
    assert_copied(work, output)


def test_continue_cli_hears_that_a_read_failed_and_nothing_is_written(agents: Agents, tmp_path: Path) -> None:
    work, output = continue_cli(agents, agents.deploy("continue", []), tmp_path, "copy missing.txt to answer.txt")
    assert "Failed to read missing.txt: Error executing tool Read: File does not exist" in output, output
    assert "Done" not in output and not (work / "answer.txt").exists(), output


def test_llm_copies_a_file_with_the_python_functions_it_is_given(agents: Agents, tmp_path: Path) -> None:
    work, user = workdir(tmp_path), home(tmp_path)
    model = agents.deploy("llm", [])
    (user / "extra-openai-models.yaml").write_text(
        f"- model_id: hearth\n  model_name: {model}\n  api_base: {agents.web}/v1\n  api_key_name: hearth\n"
        "  supports_tools: true\n"
    )
    (user / "keys.json").write_text(json.dumps({"hearth": agents.key}))
    (user / "tools.py").write_text(LLM_TOOLS)
    env = {"PATH": os.environ["PATH"], "HOME": str(user), "LLM_USER_PATH": str(user)}
    argv = [cli(CACHE / "venv-llm/bin/llm"), "-m", "hearth", "--functions", str(user / "tools.py"), TASK]
    try:
        output = run(argv, work, env)
    finally:  # the client's own file, holding the key: tests/test_secrets_kept.py reads every file the run left
        (user / "keys.json").unlink()
    assert_copied(work, output)


def test_aider_copies_a_file_in_its_whole_file_format_without_tools(agents: Agents, tmp_path: Path) -> None:
    work, user = workdir(tmp_path), home(tmp_path)
    model = agents.deploy("aider", [])
    argv = [cli(CACHE / "venv-aider/bin/aider"), "--model", f"openai/{model}"]
    argv += ["--openai-api-base", f"{agents.web}/v1", "--openai-api-key", agents.key, "--yes-always", "--no-git"]
    argv += ["--no-check-update", "--analytics-disable", "--no-show-model-warnings", "--no-pretty", "--no-stream"]
    output = run(
        [*argv, "--message", TASK, "source.txt", "answer.txt"], work, {"PATH": os.environ["PATH"], "HOME": str(user)}
    )
    assert_copied(work, output, ending="\n")


def test_opencode_on_an_8k_deployment_with_fitting_on_finishes(agents: Agents, tmp_path: Path) -> None:
    """OpenCode's first request is 7.7K of the 8K tokens (its prompt and tools) and asks for 32,000 more: Hearth
    fits the output limit to the room left, and the task is done: it ends, and does not loop. (Told an 8K context
    and 4,096 output tokens, OpenCode 1.18.33 compacts its conversation after every answer, its prompt alone being
    over the context less the output, and loops whatever the server answers: 70 requests in 2 minutes, measured.)"""
    model = agents.deploy("opencode-8k", [], context=8192, fit_max_tokens=True)
    work, output = opencode(agents, model, tmp_path, None)
    assert_copied(work, output)
