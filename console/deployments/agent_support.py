"""What coding agents need of a deployment, decided with its plan: the engine's tool-call and reasoning
parsers for the model (engines.parsers chooses them; the admin may override either with a name the engine ships,
or turn it off), and whether its context serves each coding agent's recorded first request as the model's chat
template renders it (engines.agent_clients), with and without "fit max_tokens to the context left" (the gateway's
context_fit). The plan then says which agents it serves in one sentence (engines.stored_plan.StoredPlan.agents_verdict).
"""

import re

from django.conf import settings

from console.catalog.models import ModelSource
from console.deployments.models import Deployment
from console.errors import ConsoleError
from engines.agent_clients import agent_fits
from engines.launch import EngineKind, image_version
from engines.parsers import ShippedParsers, choose_parsers, shipped_parsers
from engines.stored_plan import AgentFact, Parsers

OFF = "none"  # an override that turns the parser off
GPU_IMAGES = (EngineKind.VLLM, EngineKind.SGLANG)  # engines launched from an image whose tag names their release
PARSER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,49}$")


def check_parser(name: str, what: str, shipped: ShippedParsers | None = None) -> str:
    """An override as given ("" = the plan's choice, "none" = off), stripped. Raises ConsoleError for what is not
    a parser name, or, ``shipped`` being the engine release's own list (engines.parsers.shipped_parsers), for a
    name that release does not ship, listing those it does."""
    name = name.strip()
    if name and not PARSER_NAME.match(name):
        raise ConsoleError(f"The {what} {name!r} is not a parser name (letters, digits, '_', '.', '-').")
    kind = what.removesuffix(" parser")
    if name and name != OFF and shipped is not None and shipped.exact and shipped.lacks(name, kind):
        names = shipped.tool_call_parsers if kind == "tool-call" else shipped.reasoning_parsers
        raise ConsoleError(
            f"{shipped.engine} {shipped.version} has no {what} {name!r}; it ships {', '.join(names)} "
            f"(or 'none' to turn it off)."
        )
    return name


def parser_facts(model: ModelSource, engine: str, tool_call_parser: str = "", reasoning_parser: str = "") -> Parsers:
    """The parsers this deployment runs with, as stored in its plan: the tool-call and reasoning parsers (None:
    off), the pair chosen for the model and the family and source that chose them, reasons in words and a
    warning when requests with tools would be refused. Raises ConsoleError for a bad name."""
    shipped = shipped_parsers(engine, _release(engine))
    tool = check_parser(tool_call_parser, "tool-call parser", shipped)
    reasoning = check_parser(reasoning_parser, "reasoning parser", shipped)
    choice = choose_parsers(engine, model.config, model.chat_template)
    effective_tool = _effective(tool, choice.tool_call_parser)
    effective_reasoning = _effective(reasoning, choice.reasoning_parser)
    reasons = list(choice.reasons)
    for given, what, chosen in (
        (tool, "tool-call", choice.tool_call_parser),
        (reasoning, "reasoning", choice.reasoning_parser),
    ):
        if given:
            reasons.append(f"The admin set the {what} parser to {given} (the plan's choice: {chosen or 'none'}).")
    warning = None
    if not effective_tool and engine == EngineKind.SIMULATOR:  # it takes tools without one: a note, not a warning
        reasons.append(
            "The Simulator answers requests with tools without a tool-call parser; vLLM needs one, so set one "
            "before exporting this deployment to vLLM."
        )
    elif not effective_tool:
        warning = (
            "No tool-call parser: this engine refuses every request that carries tools, and coding agents "
            "(Claude Code, Codex, IDE assistants) always send them. Set one if the model can call tools."
        )
    return Parsers(
        tool_call_parser=effective_tool,
        reasoning_parser=effective_reasoning,
        chosen_tool_call_parser=choice.tool_call_parser,
        chosen_reasoning_parser=choice.reasoning_parser,
        family=choice.family,
        source=choice.source,
        reasons=tuple(reasons),
        warning=warning,
    )


def _release(engine: str) -> str:
    """The release of ``engine`` a deployment launches: a GPU engine's image tag ("v0.11.0"); "" for the CPU engines
    and the simulator, which run the pinned CPU builds (engines.vllm_flags, engines.sglang_flags)."""
    return image_version(settings.HEARTH_ENGINE_IMAGES.get(engine, "")) if engine in GPU_IMAGES else ""


def _effective(given: str, chosen: str | None) -> str | None:
    if given == OFF:
        return None
    return given or chosen


def agent_facts(
    max_model_len: int,
    fit_max_tokens: bool,
    takes_tools: bool = True,
    chat_template: str = "",
    max_tokens_cap: int | None = None,
) -> tuple[AgentFact, ...]:
    """Per agent, whether it is served and the tokens of context it needs, for a deployment of ``max_model_len``
    tokens with ``fit_max_tokens`` on or off and ``max_tokens_cap`` (None: no cap), its first request counted as
    the model's ``chat_template`` renders
    it ("" when the catalog holds none: engines.chat_prompt's fallback). ``takes_tools`` False (an engine without
    a tool-call parser, which refuses requests with tools): no agent is served, whatever the context, since each
    sends tools on every request."""
    refused = " But it sends tools on every request, which this engine refuses without a tool-call parser."
    return tuple(
        AgentFact(
            f.client.name, f.serves and takes_tools, f.needed, f.reason + ("" if takes_tools else refused), f.room
        )
        for f in agent_fits(max_model_len, fit_max_tokens, chat_template, max_tokens_cap)
    )


def takes_tools(engine: str, parsers: Parsers) -> bool:
    """Whether ``engine`` with these parsers (parser_facts') answers requests that carry tools: with a
    tool-call parser, or the Simulator, which needs none."""
    return bool(parsers.tool_call_parser) or engine == EngineKind.SIMULATOR


def launch_parsers(dep: Deployment) -> tuple[str | None, str | None]:
    """The (tool-call, reasoning) parsers to launch ``dep`` with: its plan's, or, for a deployment planned
    before plans held them, chosen now from its overrides."""
    parsers = dep.stored_plan.parsers
    if parsers is None:
        parsers = parser_facts(dep.source, dep.engine, dep.tool_call_parser, dep.reasoning_parser)
    return parsers.tool_call_parser, parsers.reasoning_parser
