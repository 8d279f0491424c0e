"""What coding agents need of a deployment, decided with its plan: the engine's tool-call and reasoning
parsers for the model (engines.parsers chooses them; the admin may override either, or turn it off), and
whether its context serves Claude Code's and Codex's first requests (engines.agent_clients), with and
without "fit max_tokens to the context left" (the gateway's context_fit).
"""

import re

from console.catalog.models import ModelSource
from console.deployments.models import Deployment
from console.errors import ConsoleError
from engines.agent_clients import agent_fits
from engines.launch import EngineKind
from engines.parsers import choose_parsers
from engines.stored_plan import AgentFact, Parsers

OFF = "none"  # an override that turns the parser off
PARSER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,49}$")


def check_parser(name: str, what: str) -> str:
    """An override as given ("" = the plan's choice, "none" = off), stripped. Raises ConsoleError."""
    name = name.strip()
    if name and not PARSER_NAME.match(name):
        raise ConsoleError(f"The {what} {name!r} is not a parser name (letters, digits, '_', '.', '-').")
    return name


def parser_facts(model: ModelSource, engine: str, tool_call_parser: str = "", reasoning_parser: str = "") -> Parsers:
    """The parsers this deployment runs with, as stored in its plan: the tool-call and reasoning parsers (None:
    off), the pair chosen for the model and the family and source that chose them, reasons in words and a
    warning when requests with tools would be refused. Raises ConsoleError for a bad name."""
    tool = check_parser(tool_call_parser, "tool-call parser")
    reasoning = check_parser(reasoning_parser, "reasoning parser")
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
    if effective_tool:
        warning = None
    elif engine == EngineKind.SIMULATOR:
        warning = (
            "No tool-call parser: the Simulator answers requests with tools without one, but vLLM would refuse "
            "every one of them, and coding agents always send tools. Set one before exporting this deployment."
        )
    else:
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


def _effective(given: str, chosen: str | None) -> str | None:
    if given == OFF:
        return None
    return given or chosen


def agent_facts(max_model_len: int, fit_max_tokens: bool, takes_tools: bool = True) -> tuple[AgentFact, ...]:
    """Per agent, whether it is served and the tokens of context it needs, for a deployment of ``max_model_len``
    tokens with ``fit_max_tokens`` on or off. ``takes_tools`` False (an engine without a tool-call parser, which
    refuses requests with tools): no agent is served, whatever the context, since each sends tools on every
    request."""
    refused = " But it sends tools on every request, which this engine refuses without a tool-call parser."
    return tuple(
        AgentFact(f.client.name, f.serves and takes_tools, f.needed, f.reason + ("" if takes_tools else refused))
        for f in agent_fits(max_model_len, fit_max_tokens)
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
