"""The deployment page's "Coding agents" tab gives each agent's settings (console.deployments.agent_settings): the
blocks of docs/agents.md, which the tests give the real CLIs, with this Hearth's base URL, the served model name and
the context filled in; a name that needs quoting is quoted in each language; OpenCode, Codex and Claude Code are told
no small context."""

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from django.test import Client

from console.deployments.agent_settings import CLAUDE_CONTEXT_FROM, CONTEXT_TOLD_FROM, agent_settings
from engines.agent_clients import recorded_requests
from tests.test_agent_support import hf_model, simulated

DOCS = Path(__file__).resolve().parent.parent / "docs" / "agents.md"
FENCED = re.compile(r"^```(\w+)\n(.*?)\n```$", re.MULTILINE | re.DOTALL)


def test_the_settings_for_docs_values_are_the_docs_blocks_in_order() -> None:
    blocks = [(language, text) for language, text in FENCED.findall(DOCS.read_text()) if language != "text"]
    made = [(s.language, s.text) for s in agent_settings("http://HOST:8000", "qwen3-coder", 65536)]
    assert made == blocks


def test_a_name_that_needs_quoting_is_quoted_in_each_language_and_each_block_reads_back() -> None:
    name = "org/model: v2 (test)"
    claude, codex, opencode, cont, aider, llm = agent_settings("https://hearth.example", name, 8192)
    assert f"export ANTHROPIC_MODEL={shlex.quote(name)}" in claude.text
    assert tomllib.loads(codex.text)["model"] == name
    assert tomllib.loads(codex.text)["model_providers"]["hearth"]["base_url"] == "https://hearth.example/v1"
    read = json.loads(opencode.text)
    assert read["model"] == f"hearth/{name}" and "limit" not in read["provider"]["hearth"]["models"][name]
    assert yaml.safe_load(cont.text)["models"][0]["model"] == name
    assert shlex.split(aider.text.replace("\\\n", ""))[2] == f"openai/{name}"
    assert yaml.safe_load(llm.text)[0]["model_name"] == name


@pytest.mark.parametrize("context", [0, 8192, CONTEXT_TOLD_FROM - 1])
def test_opencode_and_codex_are_told_no_context_under_32k(context: int) -> None:
    _, codex, opencode, *_ = agent_settings("http://h", "m", context)
    assert "limit" not in json.loads(opencode.text)["provider"]["hearth"]["models"]["m"]
    assert "model_context_window" not in tomllib.loads(codex.text)


@pytest.mark.parametrize(
    ("context", "told"), [(0, False), (CLAUDE_CONTEXT_FROM - 1, False), (CLAUDE_CONTEXT_FROM, True)]
)
def test_claude_code_is_told_the_context_from_64k(context: int, told: bool) -> None:
    claude = agent_settings("http://h", "m", context)[0].text
    assert (f"export CLAUDE_CODE_MAX_CONTEXT_TOKENS={context} " in claude) is told
    assert ("CLAUDE_CODE_MAX_CONTEXT_TOKENS" in claude) is told


def test_codex_is_told_the_context_from_32k_at_its_config_files_top_level() -> None:
    codex = agent_settings("http://h", "m", CONTEXT_TOLD_FROM)[1]
    assert tomllib.loads(codex.text)["model_context_window"] == CONTEXT_TOLD_FROM


@pytest.mark.django_db
def test_the_deployment_page_shows_each_agents_settings_with_the_url_it_was_reached_at(admin: Client) -> None:
    dep = simulated(hf_model("coder", "llama-3.1-8b-instruct"), max_model_len=65536)
    page = admin.get(f"/deployments/{dep.pk}/", HTTP_HOST="127.0.0.1:8000").content.decode()
    for name in ("Claude Code", "Codex", "OpenCode", "Continue (cn)", "aider", "llm"):
        assert f'<details data-agent="{name}">' in page
    assert "export ANTHROPIC_BASE_URL=http://127.0.0.1:8000\n" in page
    assert "base_url = &quot;http://127.0.0.1:8000/v1&quot;" in page
    assert "&quot;limit&quot;: { &quot;context&quot;: 65536, &quot;output&quot;: 4096 }" in page
    assert "Then run <code>HEARTH_API_KEY=hk-… codex</code>." in page
    assert 'data-field="agents-cap">' in page and "give the agent's key a max_tokens cap" in page
    assert page.count('data-field="agent-note">') == 1 and "is an error to Claude Code" in page
    assert "Their settings are below;" in page  # on the tab itself, not sent to it (a trial)


def test_the_agents_not_judged_are_named_as_such() -> None:
    """Every agent the Coding agents tab gives settings for is judged (a recorded first request) or named as not."""
    judged = {r.name for r in recorded_requests()}
    given = {s.name for s in agent_settings("http://h:8000", "m", 8192)}
    template = (Path(__file__).parents[1] / "console/deployments/templates/deployments/agent_support.html").read_text()
    sentence = template.split('data-field="agents-not-judged">')[1].split("</p>")[0]
    assert all(name in sentence for name in given - judged) and all(f"{name}'s" in sentence for name in judged)
