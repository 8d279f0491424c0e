"""The engines' tool-call and reasoning parsers chosen by model family (engines.parsers) among those the pinned
engines ship (read from their argument parsers' dumps, engines/argspecs), and which coding agents a context serves
(engines.agent_clients), in one sentence: plain data in and out."""

import json
from pathlib import Path

import pytest

from engines import argspec
from engines.agent_clients import ROOM_FOR_A_TASK, agent_fits, agents_verdict, recorded_requests
from engines.parsers import FAMILIES, choose_parsers, shipped_parsers, template_text
from engines.stored_plan import AgentFact

LLAMA31 = "{{- '<|start_header_id|>' + message['role'] }} Environment: ipython <|python_tag|>"
QWEN25 = '<|im_start|>system ... <tools></tools> <tool_call>\n{"name": ...}</tool_call>'
QWEN3 = QWEN25 + " <think>\n\n</think>"
CHATML = "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'}}"

# (config, template, engine) → (tool-call parser, reasoning parser), as each family's entry cites.
CASES = [
    ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, LLAMA31, "vllm", ("llama3_json", None)),
    ({"model_type": "llama"}, LLAMA31, "sglang", ("llama3", None)),
    ({"model_type": "llama"}, "<|im_start|> <tool_call>", "vllm", ("hermes", None)),  # Hermes 3 on Llama
    ({"model_type": "llama"}, CHATML, "vllm-cpu", ("hermes", None)),  # SmolLM2: ChatML, no tool markup
    ({"model_type": "qwen2"}, QWEN25, "vllm", ("hermes", None)),
    ({"model_type": "qwen2"}, QWEN25, "sglang", ("qwen25", None)),
    ({"model_type": "qwen2"}, QWEN3, "vllm", ("hermes", "deepseek_r1")),  # QwQ-32B
    ({"model_type": "qwen2"}, "<｜Assistant｜><think>\n", "vllm", (None, "deepseek_r1")),  # R1-Distill-Qwen
    ({"model_type": "qwen3"}, QWEN3, "vllm", ("hermes", "qwen3")),
    ({"model_type": "qwen3_moe"}, QWEN3, "sglang", ("qwen25", "qwen3")),
    ({"model_type": "qwen3_moe"}, "<tool_call>\n<function=name>", "vllm", ("qwen3_coder", None)),
    ({"model_type": "deepseek_v3"}, "<｜tool▁calls▁begin｜>", "vllm", ("deepseek_v3", None)),
    ({"model_type": "deepseek_v3"}, "<｜Assistant｜><think>", "vllm", ("deepseek_v3", "deepseek_r1")),
    ({"model_type": "deepseek_v3"}, "{% if thinking %}<think>", "sglang", ("deepseekv31", "deepseek-v3")),
    ({"model_type": "kimi_k2"}, "", "vllm", ("kimi_k2", "kimi_k2")),
    ({"model_type": "gpt_oss"}, "", "vllm", ("openai", "openai_gptoss")),
    ({"model_type": "gpt_oss"}, "", "sglang", ("gpt-oss", "gpt-oss")),
    ({"model_type": "glm4_moe"}, "", "vllm", ("glm45", "glm45")),
    ({"model_type": "mistral"}, "[INST] [TOOL_CALLS]", "vllm", ("mistral", None)),
    ({"model_type": "llama4"}, "", "vllm", ("llama4_pythonic", None)),
    (
        {"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
        "",
        "vllm",
        ("llama3_json", None),
    ),
    ({"model_type": "llama", "rope_scaling": {"rope_type": "llama3"}}, "", "sglang", ("llama3", None)),
    (
        {"model_type": "llama", "rope_scaling": {"rope_type": "llama3"}},
        "<|im_start|> <tool_call>",
        "vllm",
        ("hermes", None),
    ),
    ({"model_type": "deepseek_v32"}, "", "vllm", ("deepseek_v32", "deepseek_v3")),
    ({"model_type": "deepseek_v32"}, "", "sglang", ("deepseekv32", "deepseek-v3")),
]


@pytest.mark.parametrize(("config", "template", "engine", "expected"), CASES)
def test_each_family_gets_its_engines_parsers(
    config: dict[str, object], template: str, engine: str, expected: tuple[str | None, str | None]
) -> None:
    choice = choose_parsers(engine, config, template)
    assert (choice.tool_call_parser, choice.reasoning_parser) == expected
    assert choice.family and choice.source and choice.reasons
    assert (choice.warning is None) == (expected[0] is not None)


def test_an_unknown_model_gets_no_parsers_and_a_warning_that_says_why() -> None:
    choice = choose_parsers("vllm", {"model_type": "gemma3", "architectures": ["Gemma3ForCausalLM"]}, "")
    assert choice.tool_call_parser is None and choice.reasoning_parser is None
    assert choice.warning and "requests that carry tools" in choice.warning
    assert "gemma3" in choice.reasons[0]


def test_every_family_cites_its_source_and_names_only_parsers_the_pinned_engines_ship() -> None:
    vllm, sglang = shipped_parsers("vllm-cpu"), shipped_parsers("sglang-cpu")
    assert vllm and sglang and (vllm.version, sglang.version) == ("0.32.0", "0.5.15.post1")
    for family in FAMILIES:
        assert family.source and (family.model_types or family.architectures)
        for name, names in (
            (family.vllm_tool, vllm.tool_call_parsers),
            (family.vllm_reasoning, vllm.reasoning_parsers),
            (family.sglang_tool, sglang.tool_call_parsers),
            (family.sglang_reasoning, sglang.reasoning_parsers),
        ):
            assert name is None or name in names, (family.name, name)


def test_the_parsers_an_engine_ships_are_its_argument_parsers_own() -> None:
    vllm, sglang = argspec.load("vllm"), argspec.load("sglang")
    shipped = shipped_parsers("simulator")  # the Simulator takes vLLM's names
    assert shipped and shipped.tool_call_parsers == vllm.choices("--tool-call-parser")
    assert shipped.reasoning_parsers == vllm.choices("--reasoning-parser") and shipped.exact
    for name in ("llama3_json", "hermes", "qwen3_coder", "mistral", "deepseek_v31", "openai", "glm45", "kimi_k2"):
        assert name in shipped.tool_call_parsers
    on_sglang = shipped_parsers("sglang", "v0.5.15.post1")
    assert on_sglang and on_sglang.exact and on_sglang.tool_call_parsers == sglang.choices("--tool-call-parser")
    assert {"llama3", "qwen25", "gpt-oss", "glm45", "kimi_k2", "mistral"} <= set(on_sglang.tool_call_parsers)
    older, latest = shipped_parsers("vllm", "v0.11.0"), shipped_parsers("vllm", "latest")
    assert older and latest and not older.exact and not latest.exact  # the nearest release read: no refusal by it
    assert shipped_parsers("external") is None and vllm.choices("--max-model-len") is None


def test_the_template_is_read_from_the_file_or_the_tokenizer_config() -> None:
    assert template_text({"chat_template": "A"}) == "A"
    assert template_text({"chat_template": [{"name": "default", "template": "A"}, {"template": "B"}]}) == "A\nB"
    assert template_text({"chat_template": "A"}, "file") == "file" and template_text(None) == ""


def test_smollm2s_own_files_choose_hermes_for_vllm_cpu() -> None:
    config = json.loads((Path(__file__).parent / "data" / "smollm2-135m-config.json").read_text())
    template = "{% for message in messages %}{{'<|im_start|>' + message['role']}}{% endfor %}"
    assert choose_parsers("vllm-cpu", config, template).tool_call_parser == "hermes"


@pytest.mark.parametrize(
    ("max_model_len", "fit", "claude_code", "codex"),
    [
        (8192, False, False, False),
        (8192, True, False, False),
        (32768, False, False, True),
        (32768, True, True, True),
        (65536, False, True, True),
        (131072, False, True, True),
    ],
)
def test_which_agents_a_context_serves(max_model_len: int, fit: bool, claude_code: bool, codex: bool) -> None:
    fits = {f.client.name: f for f in agent_fits(max_model_len, fit)}
    assert (fits["Claude Code"].serves, fits["Codex"].serves) == (claude_code, codex)
    assert all(f"{max_model_len:,}" in f.reason for f in fits.values())


def test_a_context_that_fitting_would_save_says_so() -> None:
    claude = next(f for f in agent_fits(32768) if f.client.name == "Claude Code")
    assert not claude.serves and "fit max_tokens to the context left" in claude.reason
    assert [c.name for c in recorded_requests()] == ["Claude Code", "Codex"]
    # served with its answers fitted, but a trial's Claude Code with ~4,100 tokens left could not finish a task
    tight = next(f for f in agent_fits(claude.prompt.tokens + 3000, True) if f.client.name == "Claude Code")
    assert (
        tight.serves and tight.room == 3000 and "leaves about 3,000 tokens for the whole task's turns" in tight.reason
    )
    roomy = next(f for f in agent_fits(claude.prompt.tokens + ROOM_FOR_A_TASK, True) if f.client.name == "Claude Code")
    assert roomy.serves and roomy.room is None
    assert recorded_requests()[0].max_tokens == 32_000  # engines/agent_requests/claude-code-2.1.328.json


def fact(name: str, serves: bool, needed: int) -> AgentFact:
    return AgentFact(name, serves, needed, "")


@pytest.mark.parametrize(
    ("agents", "refuses_tools", "sentence", "ok"),
    [
        (
            [fact("Claude Code", True, 19481), fact("Codex", True, 13687)],
            False,
            "Claude Code and Codex are served.",
            True,
        ),
        (
            [fact("Claude Code", False, 47385), fact("Codex", True, 13687)],
            False,
            "Codex is served; Claude Code is not: Claude Code's first request needs about 47,385 tokens of context, "
            "more than the 32,768 this plan has; a max_model_len of 47,385 or more serves it, where the model's "
            "context and the memory allow.",
            False,
        ),
        (
            [fact("Claude Code", False, 47385), fact("Codex", False, 13687)],
            False,
            "No coding agent is served: Claude Code's first request needs about 47,385 tokens of context and "
            "Codex's about 13,687, more than the 32,768 this plan has; a max_model_len of 47,385 or more serves them, "
            "where the model's context and the memory allow.",
            False,
        ),
        (
            [fact("Claude Code", False, 19481), fact("Codex", False, 13687)],
            True,
            "No coding agent is served: without a tool-call parser this engine refuses every request that carries "
            "tools, which agents send; choosing one serves them.",
            False,
        ),
        (
            [AgentFact("Claude Code", True, 6177, "", 4110), fact("Codex", True, 13687)],
            False,
            "Claude Code and Codex are served, but the context leaves little after the first request's prompt "
            "(Claude Code about 4,110 tokens for a whole task's turns), which a task of a few turns fills.",
            False,
        ),
    ],
    ids=["all", "some", "none-by-context", "none-by-tools", "tight"],
)
def test_the_plan_says_which_agents_it_serves_in_one_sentence(
    agents: list[AgentFact], refuses_tools: bool, sentence: str, ok: bool
) -> None:
    verdict = agents_verdict(agents, 32768, refuses_tools)
    assert verdict and (verdict.sentence, verdict.ok) == (sentence, ok)
    assert agents_verdict([], 32768, False) is None
