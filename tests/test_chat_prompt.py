"""Agents' recorded first requests counted as a model's chat template renders them (engines.chat_prompt,
engines.agent_clients): a template that leaves tool schemas out (SmolLM2's) counts only what it keeps, so both
agents fit in its 8K context, as they really do; one that renders them, or none at hand, counts them.

tests/data/chat-templates/smollm2-135m-instruct.jinja is HuggingFaceTB/SmolLM2-135M-Instruct's chat_template.jinja
(the model scripts/convert_smollm2.py fetches), copied as it is on 2026-12-04.
"""

from pathlib import Path

import pytest

from engines.agent_clients import MIN_ANSWER_TOKENS, agent_fits, recorded_requests
from engines.chat_prompt import CHARS_PER_TOKEN, estimate_tokens, render, rendered_prompt

SMOLLM2 = (Path(__file__).parent / "data/chat-templates/smollm2-135m-instruct.jinja").read_text()
# Tools in the system turn as JSON lines, as Qwen 2.5's and Hermes' templates put them (trimmed to that part).
WITH_TOOLS = (
    "{%- if tools %}<|im_start|>system\n{{ messages[0].content }}\n<tools>\n{%- for tool in tools %}\n"
    "{{ tool | tojson }}\n{%- endfor %}\n</tools><|im_end|>\n{%- endif %}\n"
    "{%- for message in messages %}{% if not (tools and loop.first) %}<|im_start|>{{ message.role }}\n"
    "{{ message.content }}<|im_end|>\n{% endif %}{%- endfor %}<|im_start|>assistant\n"
)
ALTERNATING = "{% if messages[1].role == messages[2].role %}{{ raise_exception('roles must alternate') }}{% endif %}"


def test_the_records_are_the_clis_first_requests_with_their_tools() -> None:
    claude, codex = recorded_requests()
    assert (claude.name, claude.version, claude.max_tokens) == ("Claude Code", "2.1.328", 32_000)
    assert len(claude.tools) == 12 and {"Read", "Write", "Bash", "Edit"} <= set(claude.tool_names)
    assert (codex.name, codex.version, codex.max_tokens) == ("Codex", "0.169.0", None)
    assert "exec_command" in codex.tool_names
    assert [m["role"] for m in claude.messages] == ["system", "user"]


def test_smollm2s_template_drops_the_tool_schemas_and_both_agents_fit_its_8k_context() -> None:
    fits = agent_fits(8192, True, SMOLLM2)
    assert [f.serves for f in fits] == [True, True]
    for fit in fits:
        assert not fit.prompt.tools_rendered and fit.prompt.how == ""
        assert '"properties"' not in fit.prompt.text and fit.prompt.text.endswith("<|im_start|>assistant\n")
        assert fit.needed == fit.prompt.tokens + MIN_ANSWER_TOKENS
        assert "whose schemas the chat template leaves out" in fit.reason and "it fits in 8,192" in fit.reason


def test_a_template_that_renders_the_tools_counts_them() -> None:
    claude = recorded_requests()[0]
    without = rendered_prompt(SMOLLM2, claude.messages, claude.tools)
    with_tools = rendered_prompt(WITH_TOOLS, claude.messages, claude.tools)
    assert with_tools.tools_rendered and '"name": "Read"' in with_tools.text
    assert with_tools.tokens > 2 * without.tokens
    fits = agent_fits(8192, True, WITH_TOOLS)
    assert not any(f.serves for f in fits) and all("does not fit in 8,192" in f.reason for f in fits)


def test_without_a_template_every_schema_is_counted_and_the_reason_says_so() -> None:
    fits = agent_fits(32768, False)
    assert all(f.prompt.tools_rendered and "no chat template being at hand" in f.reason for f in fits)
    claude = fits[0]
    assert claude.needed == claude.prompt.tokens + 32_000 and not claude.serves


def test_a_template_that_refuses_the_conversation_is_counted_with_the_fallback_and_says_why() -> None:
    codex = recorded_requests()[1]  # system, user, user: templates that want alternating roles refuse it
    prompt = rendered_prompt(ALTERNATING, codex.messages, codex.tools)
    assert "roles must alternate" in prompt.how and prompt.tools_rendered


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("a", 1), ("abcdefg", 2), ("x" * 3500, 1000)])
def test_tokens_are_estimated_from_characters(text: str, tokens: int) -> None:
    assert CHARS_PER_TOKEN == 3.5 and estimate_tokens(text) == tokens


def test_text_parts_are_joined_and_non_ascii_kept_as_transformers_renders() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "é"}]}]
    tools = [{"type": "function", "function": {"name": "é"}}]
    assert render("{{ messages[0].content }}|{{ tools[0] | tojson }}", messages, tools) == (
        'a\né|{"type": "function", "function": {"name": "é"}}'
    )
