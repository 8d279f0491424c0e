"""Which coding agents a deployment's context can serve, from the size of each agent's first request, and the
plan's verdict on them in one sentence (agents_verdict).

A coding agent's first request carries its whole system prompt and tool schemas before the user has said
anything, and asks for a fixed output limit whatever the model: a deployment whose max_model_len is under
prompt + limit refuses every request (vLLM: "maximum context length is 8192 tokens ... you requested 44308"),
unless the gateway fits the limit to the context left (gateway.context_fit), which then needs room for the
prompt and a useful answer.

Sizes measured with the real CLIs from npm through Hearth against the engine simulator (whose tokenizer
counts a word or a punctuation mark as one token: a real model's tokenizer differs, so each need is given
a margin of CONTEXT_MARGIN):

- Claude Code 2.1.328 (``claude -p``): 12,308 prompt tokens (22 tools) and ``max_tokens`` 32,000
  (../shared/FACTS.md, "Real coding-agent clients", 2026-12-01);
- Codex 0.169.0 (``codex exec``): 7,673 prompt tokens (9 tools) and no ``max_output_tokens`` (the engine
  then gives it what the context leaves), measured 2026-12-01 for this module (tests/test_agents_cli.py
  runs the same CLIs).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

CONTEXT_MARGIN = 1.25  # a real tokenizer's count against the simulator's word count, either way
MIN_ANSWER_TOKENS = 4096  # room for an answer worth having when the output limit is fitted or unset


@dataclass(frozen=True)
class AgentClient:
    """One agent's first request: ``prompt_tokens`` (the simulator's count) and the ``max_tokens`` it asks
    for (None: it asks for none, and the engine gives it the context left)."""

    name: str
    version: str
    prompt_tokens: int
    max_tokens: int | None
    source: str


AGENT_CLIENTS: tuple[AgentClient, ...] = (
    AgentClient("Claude Code", "2.1.328", 12_308, 32_000, "../shared/FACTS.md, Real coding-agent clients"),
    AgentClient("Codex", "0.169.0", 7_673, None, "measured through the simulator, 2026-12-01 (module docstring)"),
)


@dataclass(frozen=True)
class AgentFit:
    """Whether a context serves one agent: ``needed`` tokens (with the margin), and why, in words."""

    client: AgentClient
    serves: bool
    needed: int
    reason: str


def agent_fits(max_model_len: int, fit_max_tokens: bool = False) -> list[AgentFit]:
    """For each agent of AGENT_CLIENTS, whether a deployment of ``max_model_len`` tokens serves its first
    request: prompt + its output limit, or, with ``fit_max_tokens`` on or no limit asked, prompt +
    MIN_ANSWER_TOKENS; each with CONTEXT_MARGIN on the prompt."""
    fits: list[AgentFit] = []
    for client in AGENT_CLIENTS:
        prompt = round(client.prompt_tokens * CONTEXT_MARGIN)
        fitted = fit_max_tokens or client.max_tokens is None
        needed = prompt + (MIN_ANSWER_TOKENS if fitted else client.max_tokens or 0)
        serves = max_model_len >= needed
        fits.append(AgentFit(client, serves, needed, _reason(client, max_model_len, fit_max_tokens, needed, prompt)))
    return fits


def _reason(client: AgentClient, max_model_len: int, fit_max_tokens: bool, needed: int, prompt: int) -> str:
    if client.max_tokens is None:
        how = "with no output limit"
    elif fit_max_tokens:
        how = "with max_tokens fitted to the context left"
    else:
        how = f"asking for {client.max_tokens:,} output tokens"
    verdict = "fits" if max_model_len >= needed else "does not fit"
    reason = (
        f"{client.name} {client.version}'s first request ({client.prompt_tokens:,} prompt tokens, {how}) "
        f"needs about {needed:,} tokens of context: it {verdict} in {max_model_len:,}."
    )
    if verdict != "fits" and not fit_max_tokens and client.max_tokens is not None:
        if max_model_len >= prompt + MIN_ANSWER_TOKENS:
            reason += ' Turning on "fit max_tokens to the context left" would let it through.'
    return reason


class Served(Protocol):
    """One agent's verdict as a plan keeps it (engines.stored_plan.AgentFact)."""

    @property
    def name(self) -> str: ...

    @property
    def serves(self) -> bool: ...

    @property
    def needed(self) -> int: ...


@dataclass(frozen=True)
class Verdict:
    """One sentence on which coding agents a plan serves, and whether it serves them all (``ok``)."""

    sentence: str
    ok: bool


def agents_verdict(agents: Sequence[Served], max_model_len: int, refuses_tools: bool) -> Verdict | None:
    """The plan's verdict on ``agents`` in one sentence: which are served, and, for those that are not, the one
    reason: an engine that ``refuses_tools`` (no tool-call parser: every agent sends tools), else the context
    each needs against ``max_model_len`` tokens. None without agents (a plan that did not judge them)."""
    if not agents:
        return None
    served = [a.name for a in agents if a.serves]
    missed = [a for a in agents if not a.serves]
    if not missed:
        return Verdict(f"{_names(served)} {_is(served)} served.", True)
    if refuses_tools:
        why = "without a tool-call parser this engine refuses every request that carries tools, which agents send"
    else:
        first, *rest = missed
        needs = " and ".join(
            [f"{first.name}'s first request needs about {first.needed:,} tokens of context"]
            + [f"{a.name}'s about {a.needed:,}" for a in rest]
        )
        why = f"{needs}, more than the {max_model_len:,} this plan has"
    if served:
        missing = [a.name for a in missed]
        return Verdict(f"{_names(served)} {_is(served)} served; {_names(missing)} {_is(missing)} not: {why}.", False)
    return Verdict(f"No coding agent is served: {why}.", False)


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _is(names: list[str]) -> str:
    return "is" if len(names) == 1 else "are"
