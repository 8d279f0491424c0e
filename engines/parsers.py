"""The tool-call parser and reasoning parser an engine needs for a model family, as data.

Without a tool-call parser vLLM refuses every request that carries tools (400 "auto" tool choice requires
--enable-auto-tool-choice and --tool-call-parser to be set), and coding agents always send tools; without a
reasoning parser a thinking model's reasoning arrives mixed into its answer. A family is recognised by its
config.json (``model_type``, ``architectures``) and, where one architecture serves several families, by its
chat template's own tool-call or thinking markup (``tokenizer_config.json``'s ``chat_template`` or
``chat_template.jinja``), or, for Llama 3.1 and later whose template is not at hand (a demo catalog entry), by
its config's ``rope_scaling.rope_type`` "llama3".

Parser names are each engine's own, read from the engines' argument parsers as dumped in engines/argspecs
(engines.argspec): SGLang 0.5.15.post1's ``--tool-call-parser`` and ``--reasoning-parser`` choices, and the
registries vLLM 0.32.0 checks its two flags against right after parsing (scripts/dump_engine_parser.py says
how). shipped_parsers gives every name an engine ships; tests/test_parsers.py checks each family's names are
among them. Which family takes which parser: vLLM's docs (docs/features/tool_calling.md,
docs/features/reasoning_outputs.md), SGLang's (docs/advanced_features/tool_parser.md, separate_reasoning.md),
and the models' own cards, named per entry. The admin can override the choice with any name the engine ships,
and the console warns when there is none.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engines import argspec
from engines.engine_version import parse_version


@dataclass(frozen=True)
class Family:
    """One model family and its parsers. It matches a model whose ``model_type`` is among ``model_types`` (or
    whose architectures are among ``architectures``) and whose chat template holds every string in
    ``template_has``; entries are tried in order, the first match wins. None: the engine has no parser for it."""

    name: str
    vllm_tool: str | None
    vllm_reasoning: str | None
    sglang_tool: str | None
    sglang_reasoning: str | None
    source: str
    model_types: frozenset[str] = frozenset()
    architectures: frozenset[str] = frozenset()
    template_has: tuple[str, ...] = ()
    rope_types: frozenset[str] = frozenset()  # or, without the template's markers, a config's rope_scaling type

    def matches(self, model_type: str, architectures: set[str], template: str, rope_type: str = "") -> bool:
        kind = model_type in self.model_types or bool(architectures & self.architectures)
        return kind and (all(marker in template for marker in self.template_has) or rope_type in self.rope_types)


def _f(
    name: str,
    tools: tuple[str | None, str | None],
    reasoning: tuple[str | None, str | None],
    source: str,
    types: tuple[str, ...] = (),
    archs: tuple[str, ...] = (),
    template: tuple[str, ...] = (),
    rope: tuple[str, ...] = (),
) -> Family:
    return Family(
        name,
        tools[0],
        reasoning[0],
        tools[1],
        reasoning[1],
        source,
        frozenset(types),
        frozenset(archs),
        template,
        frozenset(rope),
    )


VLLM_DOCS = "vLLM docs/features/tool_calling.md and reasoning_outputs.md"
SGLANG_DOCS = "SGLang docs/advanced_features/tool_parser.md and separate_reasoning.md"
# (vLLM, SGLang) names per family; the more specific template first where an architecture is shared.
FAMILIES: tuple[Family, ...] = (
    _f(
        "gpt-oss",
        ("openai", "gpt-oss"),
        ("openai_gptoss", "gpt-oss"),
        f"{VLLM_DOCS} (gpt-oss section); {SGLANG_DOCS}",
        types=("gpt_oss",),
    ),
    _f(
        "Kimi K2",
        ("kimi_k2", "kimi_k2"),
        ("kimi_k2", "kimi_k2"),
        f"{VLLM_DOCS} (Kimi-K2 section); {SGLANG_DOCS}; moonshotai/Kimi-K2-Instruct model card",
        types=("kimi_k2",),
    ),
    _f(
        "DeepSeek-V3.2",
        ("deepseek_v32", "deepseekv32"),
        ("deepseek_v3", "deepseek-v3"),
        f"{VLLM_DOCS} and vLLM's DeepSeek-V3.2 recipe (deepseek_v32, reasoning deepseek_v3); {SGLANG_DOCS}",
        types=("deepseek_v32",),
    ),
    _f(
        "DeepSeek-V3.1",
        ("deepseek_v31", "deepseekv31"),
        ("deepseek_v3", "deepseek-v3"),
        f"{VLLM_DOCS} (DeepSeek-V3.1 section); {SGLANG_DOCS}",
        types=("deepseek_v3",),
        template=("thinking",),
    ),
    _f(
        "DeepSeek-R1",
        ("deepseek_v3", "deepseekv3"),
        ("deepseek_r1", "deepseek-r1"),
        f"{VLLM_DOCS} (DeepSeek-V3/R1-0528 section); {SGLANG_DOCS}",
        types=("deepseek_v3",),
        template=("<think>",),
    ),
    _f(
        "DeepSeek-V3",
        ("deepseek_v3", "deepseekv3"),
        (None, None),
        f"{VLLM_DOCS} (DeepSeek-V3 section); {SGLANG_DOCS}",
        types=("deepseek_v3",),
    ),
    _f(
        "GLM-4.5 / 4.6",
        ("glm45", "glm45"),
        ("glm45", "glm45"),
        f"{VLLM_DOCS} (GLM-4.5 section); {SGLANG_DOCS}",
        types=("glm4_moe",),
    ),
    _f(
        "Qwen3-Coder",
        ("qwen3_coder", "qwen3_coder"),
        (None, None),
        f"{VLLM_DOCS} (Qwen3-Coder section); {SGLANG_DOCS}; Qwen/Qwen3-Coder-30B-A3B-Instruct model card",
        types=("qwen3", "qwen3_moe"),
        template=("<function=",),
    ),
    _f(
        "Qwen3",
        ("hermes", "qwen25"),
        ("qwen3", "qwen3"),
        f"{VLLM_DOCS} (Qwen section: hermes; reasoning qwen3); {SGLANG_DOCS}",
        types=("qwen3", "qwen3_moe"),
    ),
    _f(
        "QwQ / Qwen2.5 reasoning",
        ("hermes", "qwen25"),
        ("deepseek_r1", "deepseek-r1"),
        f"{VLLM_DOCS} (QwQ-32B takes deepseek_r1); {SGLANG_DOCS}",
        types=("qwen2",),
        template=("<tool_call>", "<think>"),
    ),
    _f(
        "DeepSeek-R1-Distill (Qwen, Llama)",
        (None, None),
        ("deepseek_r1", "deepseek-r1"),
        f"{VLLM_DOCS} (reasoning_outputs: DeepSeek R1 series); {SGLANG_DOCS}",
        types=("qwen2", "llama"),
        template=("<｜Assistant｜>",),
    ),
    _f(
        "Qwen2.5",
        ("hermes", "qwen25"),
        (None, None),
        f"{VLLM_DOCS} (Qwen section: Qwen2.5's template supports Hermes-style calls); {SGLANG_DOCS}",
        types=("qwen2",),
        template=("<tool_call>",),
    ),
    _f(
        "Llama 4",
        ("llama4_pythonic", "pythonic"),
        (None, None),
        f"{VLLM_DOCS} (Llama 4 section); {SGLANG_DOCS}",
        types=("llama4",),
    ),
    _f(
        "Hermes 2 Pro / 3 (Llama)",
        ("hermes", "hermes"),
        (None, None),
        f"{VLLM_DOCS} (NousResearch Hermes section); {SGLANG_DOCS}",
        types=("llama",),
        template=("<tool_call>",),
    ),
    _f(
        "Llama 3.1 / 3.2 / 3.3",
        ("llama3_json", "llama3"),
        (None, None),
        f"{VLLM_DOCS} (Llama 3.1 section: llama3_json); {SGLANG_DOCS} (llama3)",
        types=("llama",),
        template=("<|start_header_id|>",),
        rope=("llama3",),  # Llama 3.1, 3.2 and 3.3's config.json; Llama 3.0 has no rope_scaling
    ),
    _f(
        "Magistral",
        ("mistral", "mistral"),
        ("mistral", "mistral"),
        f"{VLLM_DOCS} (Mistral section; reasoning_outputs: Magistral); {SGLANG_DOCS}",
        types=("mistral", "mistral3"),
        template=("[THINK]",),
    ),
    _f(
        "Mistral / Mixtral",
        ("mistral", "mistral"),
        (None, None),
        f"{VLLM_DOCS} (Mistral section); {SGLANG_DOCS}",
        types=("mistral", "mixtral", "mistral3"),
    ),
    _f(
        "IBM Granite 3",
        ("granite", None),
        ("granite", None),
        f"{VLLM_DOCS} (IBM Granite section); SGLang names no Granite parser",
        types=("granite",),
    ),
    _f(
        "MiniMax-M2",
        ("minimax_m2", "minimax-m2"),
        ("minimax_m2_append_think", "minimax-append-think"),
        f"{VLLM_DOCS} (MiniMax section); {SGLANG_DOCS}",
        types=("minimax_m2",),
    ),
    _f(
        "ChatML without tool markup (SmolLM2, ...)",
        ("hermes", "qwen25"),
        (None, None),
        "the Hermes format is ChatML's tool convention (NousResearch/Hermes-2-Pro model card); the template "
        "renders no tools, so calls are unlikely but requests with tools are accepted",
        types=("llama", "qwen2"),
        template=("<|im_start|>",),
    ),
)


@dataclass(frozen=True)
class ParserChoice:
    """The parsers chosen for one engine, with the family that chose them and why, in words."""

    tool_call_parser: str | None
    reasoning_parser: str | None
    family: str | None
    source: str | None
    reasons: list[str] = field(default_factory=list)

    @property
    def warning(self) -> str | None:
        """What the console should warn about: no tool-call parser means requests with tools are refused."""
        if self.tool_call_parser is not None:
            return None
        return (
            "No tool-call parser is known for this model on this engine: requests that carry tools "
            "(every coding agent's) will be refused. Set one under the engine's flags if the model can "
            "call tools."
        )


def template_text(tokenizer_config: Mapping[str, Any] | None, chat_template: str | None = None) -> str:
    """The chat template's text: a ``chat_template.jinja`` file's, else ``tokenizer_config.json``'s (a string,
    or a list of named templates, all joined)."""
    if chat_template:
        return chat_template
    raw = (tokenizer_config or {}).get("chat_template")
    if isinstance(raw, list):
        return "\n".join(str(t.get("template", "")) for t in raw if isinstance(t, dict))
    return raw if isinstance(raw, str) else ""


def choose_parsers(engine: str, config: Mapping[str, Any], template: str = "") -> ParserChoice:
    """The tool-call and reasoning parsers for a model (its config.json and chat template text) on ``engine``
    ("vllm", "vllm-cpu" or "simulator" take vLLM's names, "sglang" and "sglang-cpu" SGLang's). A model no family
    matches gets no parsers, and says so."""
    model_type = str(config.get("model_type") or "")
    architectures = {str(a) for a in config.get("architectures") or []}
    rope = config.get("rope_scaling")
    rope_type = str(rope.get("rope_type") or rope.get("type") or "") if isinstance(rope, Mapping) else ""
    sglang = engine in ("sglang", "sglang-cpu")
    for family in FAMILIES:
        if family.matches(model_type, architectures, template, rope_type):
            tool = family.sglang_tool if sglang else family.vllm_tool
            reasoning = family.sglang_reasoning if sglang else family.vllm_reasoning
            said = f"{family.name}: tool-call parser {tool or 'none'}, reasoning parser {reasoning or 'none'}"
            return ParserChoice(tool, reasoning, family.name, family.source, [f"{said} ({family.source})."])
    shown = model_type or ", ".join(sorted(architectures)) or "unknown"
    return ParserChoice(None, None, None, None, [f"No known parsers for model type {shown}."])


PARSER_DUMPS = {"vllm": "vllm", "vllm-cpu": "vllm", "simulator": "vllm", "sglang": "sglang", "sglang-cpu": "sglang"}
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


@dataclass(frozen=True)
class ShippedParsers:
    """The parser names one engine release accepts (``engine`` "vLLM" or "SGLang", its ``version``), in its own
    order; ``exact``: the release asked for is the one read (else the nearest read, engines.argspec.load)."""

    engine: str
    version: str
    tool_call_parsers: tuple[str, ...]
    reasoning_parsers: tuple[str, ...]
    exact: bool

    def lacks(self, name: str, kind: str) -> bool:
        """Whether ``name`` is not a ``kind`` ("tool-call" or "reasoning") parser of this release."""
        names = self.tool_call_parsers if kind == "tool-call" else self.reasoning_parsers
        return name not in names


def shipped_parsers(engine: str, version: str = "") -> ShippedParsers | None:
    """The tool-call and reasoning parsers ``engine`` (an EngineKind value; the simulator takes vLLM's names) ships
    at ``version`` ("" or "v0.11.0": its release; "" is the pinned CPU build's), as its argument parser's dump
    lists them: the nearest release dumped, ``exact`` False when that is not ``version`` (or ``version`` is no
    release number, an image tagged "latest"); None for an engine without parsers (an external one)."""
    kind = PARSER_DUMPS.get(engine)
    if kind is None:
        return None
    wanted = version.lstrip("v")
    try:
        spec = argspec.load(kind, wanted or None)
        exact = not wanted or parse_version(wanted) == parse_version(spec.version)
    except ValueError:
        spec, exact = argspec.load(kind), False
    tools, reasoning = spec.choices("--tool-call-parser") or (), spec.choices("--reasoning-parser") or ()
    return ShippedParsers(ENGINE_NAMES[kind], spec.version, tuple(map(str, tools)), tuple(map(str, reasoning)), exact)
