"""The settings that point each coding agent at a deployment through Hearth, as the deployment page's "Coding
agents" tab shows them: the blocks of docs/agents.md with this Hearth's base URL, the deployment's served model
name and its context filled in (tests/test_agent_settings.py holds the two to the same text).

The API key stays ``hk-…``: keys are shown once, when made, and the page says where to make one.
"""

import json
import re
import shlex
from dataclasses import dataclass
from string import Template

KEY = "hk-…"
# A key's max_tokens cap bounds the answers of a model that does not end them (the deployment page says so above
# the blocks); Claude Code alone takes an answer cut at the cap for an error (a trial: SmolLM2 behind a 200-token
# cap gave "API Error: Claude's response exceeded the 200 output token maximum" after 41 s).
CAPPED_CLAUDE = (
    "An answer cut at its key's max_tokens cap is an error to Claude Code (\"Claude's response exceeded the N "
    'output token maximum"): give its key no cap, and it a model that ends its answers.'
)
# OpenCode and Codex compact their conversations by the context they are told: told a small one they compact after
# every answer and never end (docs/agents.md, measured: OpenCode at 8K–16K; Codex 0.169 told 8,000, below its own
# ~7,700-token prompt, sent 280 requests in 180 s and wrote nothing). Below this many tokens neither is told one:
# OpenCode then asks for 32,000 output tokens, which fitting lowers to what is left, and Codex keeps its default.
CONTEXT_TOLD_FROM = 32_768
OPENCODE_OUTPUT = 4096  # the output limit OpenCode is told with the context
# Claude Code 2.1.328 assumes a context of 1M tokens for a model it does not know, unless CLAUDE_CODE_MAX_CONTEXT_TOKENS
# says it (its `/context` command: "12.8k / 65.5k" told 65,536). It compacts its conversation once it is within an
# "autocompact buffer" of that end: min(its output limit, 20,000) + ~13,000 tokens, 33,000 by default. Told a context
# under twice that, its own ~13K prompt is already past the point where it compacts, so below this it is told none.
CLAUDE_CONTEXT_FROM = 65_536
_PLAIN_YAML = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")


@dataclass(frozen=True)
class AgentSettings:
    """One agent's settings: its ``name``, ``where`` they go (a file or the environment), the block's
    ``language`` (sh, toml, json, yaml) and ``text``, ``then``, how to run it with them ("" when the block runs
    it), and a ``note`` on what to watch for ("" when none)."""

    name: str
    where: str
    language: str
    text: str
    then: str
    note: str = ""


CLAUDE_CODE = Template("""\
export ANTHROPIC_BASE_URL=$base
export ANTHROPIC_AUTH_TOKEN=$key            # or ANTHROPIC_API_KEY; with both set, the Hearth key is used
export ANTHROPIC_MODEL=$model_sh          # the served model name
export ANTHROPIC_SMALL_FAST_MODEL=$model_sh ANTHROPIC_DEFAULT_HAIKU_MODEL=$model_sh
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1$claude_context
claude""")
CODEX = Template("""\
model = $model_json                 # the served model name
model_provider = "hearth"$codex_context

[model_providers.hearth]
name = "Hearth"
base_url = "$base/v1"
env_key = "HEARTH_API_KEY"            # the variable that holds the key
wire_api = "responses\"""")
OPENCODE = Template("""\
{
  "$$schema": "https://opencode.ai/config.json",
  "provider": {
    "hearth": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Hearth",
      "options": { "baseURL": "$base/v1", "apiKey": "{env:HEARTH_API_KEY}" },
      "models": { $model_json: { "name": $model_json$limit } }
    }
  },
  "model": $opencode_model
}""")
CONTINUE = Template("""\
name: Hearth
version: 1.0.0
schema: v1
models:
  - name: $model_yaml
    provider: openai
    model: $model_yaml
    apiBase: $base/v1
    apiKey: $key
    roles: [chat, edit, apply]
    capabilities: [tool_use]""")
AIDER = Template("""\
aider --model $aider_model --openai-api-base $base/v1 --openai-api-key $key \\
  --no-show-model-warnings FILES...""")
LLM = Template("""\
- model_id: hearth
  model_name: $model_yaml
  api_base: $base/v1
  api_key_name: hearth
  supports_tools: true""")


def _yaml(text: str) -> str:
    """``text`` as a YAML scalar: as it is where it is plain, else double-quoted (JSON's strings are YAML's)."""
    return text if _PLAIN_YAML.fullmatch(text) else json.dumps(text)


def agent_settings(base_url: str, model: str, context: int) -> list[AgentSettings]:
    """Each agent's settings for a deployment served as ``model`` (its served model name) by the Hearth at
    ``base_url`` (scheme and host, no path: ``http://HOST:8000``), whose context is ``context`` tokens (its
    max_model_len; 0 where unknown): OpenCode and Codex are told it from CONTEXT_TOLD_FROM, Claude Code from
    CLAUDE_CONTEXT_FROM. In docs/agents.md's
    order."""
    limit, codex_context, claude_context = "", "", ""
    if context >= CLAUDE_CONTEXT_FROM:
        told = f"export CLAUDE_CODE_MAX_CONTEXT_TOKENS={context}"
        claude_context = f"\n{told}  # max_model_len: it compacts before it is full"
    if context >= CONTEXT_TOLD_FROM:
        limit = f', "limit": {{ "context": {context}, "output": {OPENCODE_OUTPUT} }}'
        window = f"model_context_window = {context}".ljust(38)
        codex_context = f"\n{window}# max_model_len: Codex compacts before it is full"
    values = {
        "base": base_url,
        "key": KEY,
        "model_sh": shlex.quote(model),
        "model_json": json.dumps(model),
        "model_yaml": _yaml(model),
        "aider_model": shlex.quote(f"openai/{model}"),
        "opencode_model": json.dumps(f"hearth/{model}"),
        "limit": limit,
        "codex_context": codex_context,
        "claude_context": claude_context,
    }
    return [
        AgentSettings(
            "Claude Code",
            "the environment; the base URL has no /v1",
            "sh",
            CLAUDE_CODE.substitute(values),
            "",
            CAPPED_CLAUDE,
        ),
        AgentSettings("Codex", "~/.codex/config.toml", "toml", CODEX.substitute(values), f"HEARTH_API_KEY={KEY} codex"),
        AgentSettings(
            "OpenCode",
            "opencode.json in the project, or ~/.config/opencode/opencode.json",
            "json",
            OPENCODE.substitute(values),
            f'HEARTH_API_KEY={KEY} opencode run "TASK"',
        ),
        AgentSettings(
            "Continue (cn)", "~/.continue/config.yaml", "yaml", CONTINUE.substitute(values), 'cn -p "TASK" --auto'
        ),
        AgentSettings("aider", "its command line", "sh", AIDER.substitute(values), ""),
        AgentSettings(
            "llm",
            'extra-openai-models.yaml in llm\'s folder: dirname "$(llm logs path)"',
            "yaml",
            LLM.substitute(values),
            'llm keys set hearth && llm -m hearth "Hi"',  # keys set asks for the key
        ),
    ]
