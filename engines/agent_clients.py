"""Which coding agents a deployment's context can serve, from each agent's first request as its chat template
renders it, and the plan's verdict on them in one sentence (agents_verdict).

A coding agent's first request carries its whole system prompt and tool schemas before the user has said
anything, and asks for a fixed output limit whatever the model: a deployment whose max_model_len is under
prompt + limit refuses every request (vLLM: "maximum context length is 8192 tokens ... you requested 44308"),
unless the gateway fits the limit to the context left (gateway.context_fit), which then needs room for the
prompt and a turn's answer.

Each agent's first request is data, recorded from the real CLI (REQUESTS_DIR/<client>-<version>.json, written by
scripts/record-agent-requests.sh and checked against the installed CLIs by tests/test_agent_requests.py): the
chat-completions messages and tools the gateway makes of it, and the ``max_tokens`` it asks for. Its prompt is
counted as the deployment's chat template renders it (engines.chat_prompt), so a template that leaves tool
schemas out counts only what it keeps.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from engines.chat_prompt import Prompt, rendered_prompt

REQUESTS_DIR = Path(__file__).resolve().parent / "agent_requests"
# Room for one turn when the output limit is fitted or unset: a tool call carrying a file, or a short answer
# (an agent's turns are mostly tool calls of a few hundred tokens).
MIN_ANSWER_TOKENS = 2048
# Context past the first request's prompt that a task of several turns needs (its tool results and answers
# accumulate in every request after): less is served but tight. A trial's Claude Code on an 8K context (~4,100
# tokens left after its prompt) had its first answer cut at the context's end and could not finish a task.
ROOM_FOR_A_TASK = 16384


@dataclass(frozen=True, eq=False)  # compared and hashed as one object: recorded_requests keeps one of each
class AgentRequest:
    """One agent's recorded first request: the CLI's ``name`` and ``version``, the day it was ``captured``, the
    chat-completions ``messages`` and ``tools`` it becomes, and the ``max_tokens`` it asks for (None: it asks for
    none, and the engine gives it the context left)."""

    name: str
    version: str
    captured: str
    max_tokens: int | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools it sends, in order."""
        return [str(t["function"]["name"]) for t in self.tools]


@lru_cache(maxsize=4)
def recorded_requests(folder: Path = REQUESTS_DIR) -> tuple[AgentRequest, ...]:
    """Each agent's first request as recorded in ``folder``, the newest version of each client, by client name.
    Raises OSError or ValueError for an unreadable or malformed record (a defect of the build, not of input)."""
    newest: dict[str, AgentRequest] = {}
    for path in folder.glob("*.json"):
        raw = json.loads(path.read_text())
        request = AgentRequest(
            raw["client"],
            raw["version"],
            raw["captured"],
            raw["max_tokens"],
            raw["chat"]["messages"],
            raw["chat"]["tools"],
        )
        held = newest.get(request.name)
        if held is None or _release(request.version) > _release(held.version):
            newest[request.name] = request
    return tuple(newest[name] for name in sorted(newest))


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


@dataclass(frozen=True)
class AgentFit:
    """Whether a context serves one agent: its ``prompt`` as rendered, the ``needed`` tokens, and why, in words;
    ``room``: where it is served, the tokens the context leaves after the first request's prompt when that is under
    ROOM_FOR_A_TASK (a task of several turns fills it), else None."""

    client: AgentRequest
    prompt: Prompt
    serves: bool
    needed: int
    reason: str
    room: int | None = None


def agent_fits(
    max_model_len: int, fit_max_tokens: bool = False, chat_template: str = "", max_tokens_cap: int | None = None
) -> list[AgentFit]:
    """For each recorded agent, whether a deployment of ``max_model_len`` tokens whose model has ``chat_template``
    ("" when none is at hand) serves its first request: the rendered prompt + its output limit (lowered to the
    deployment's ``max_tokens_cap``, set to it where none is asked, as the gateway does), or, with
    ``fit_max_tokens`` on or no limit at all, the prompt + MIN_ANSWER_TOKENS."""
    fits: list[AgentFit] = []
    for client in recorded_requests():
        prompt = _prompt(chat_template, client)
        asked = client.max_tokens
        if max_tokens_cap is not None:
            asked = max_tokens_cap if asked is None else min(asked, max_tokens_cap)
        fitted = fit_max_tokens or asked is None
        needed = prompt.tokens + (MIN_ANSWER_TOKENS if fitted else asked or 0)
        reason = _reason(client, prompt, max_model_len, fit_max_tokens, needed, asked)
        serves, left = max_model_len >= needed, max_model_len - prompt.tokens
        room = left if serves and left < ROOM_FOR_A_TASK else None
        if room is not None:
            reason += (
                f" But it leaves about {room:,} tokens for the whole task's turns (tool results and answers"
                f" accumulate), which a task of a few turns fills; a max_model_len of"
                f" {prompt.tokens + ROOM_FOR_A_TASK:,} or more gives it room."
            )
        fits.append(AgentFit(client, prompt, serves, needed, reason, room))
    return fits


@lru_cache(maxsize=32)
def _prompt(chat_template: str, client: AgentRequest) -> Prompt:
    return rendered_prompt(chat_template, client.messages, client.tools)


def _reason(
    client: AgentRequest, prompt: Prompt, max_model_len: int, fit_max_tokens: bool, needed: int, asked: int | None
) -> str:
    """Why the agent is served or not, in one or two sentences; ``asked``: its output limit after the deployment's
    cap."""
    if asked is None:
        how = "with no output limit"
    elif fit_max_tokens:
        how = "with max_tokens fitted to the context left"
    elif client.max_tokens is None:
        how = f"asking for no output limit, the deployment's max_tokens cap setting it to {asked:,}"
    elif asked != client.max_tokens:
        how = f"asking for {client.max_tokens:,} output tokens, the deployment's max_tokens cap making it {asked:,}"
    else:
        how = f"asking for {asked:,} output tokens"
    tools = f"{len(client.tools)} tools" + (
        "" if prompt.tools_rendered else ", whose schemas the chat template leaves out"
    )
    counted = prompt.how or "as the model's chat template renders it"
    verdict = "fits" if max_model_len >= needed else "does not fit"
    reason = (
        f"{client.name} {client.version}'s first request (about {prompt.tokens:,} prompt tokens {counted}, {tools}; "
        f"{how}) needs about {needed:,} tokens of context: it {verdict} in {max_model_len:,}."
    )
    if verdict == "fits" and asked is not None and asked != client.max_tokens:
        reason += f" Its answers stop at {asked:,} tokens: a longer one comes back cut (finish reason length)."
    if verdict != "fits" and not fit_max_tokens and asked is not None:
        if max_model_len >= prompt.tokens + MIN_ANSWER_TOKENS:
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

    @property
    def room(self) -> int | None: ...


@dataclass(frozen=True)
class Verdict:
    """One sentence on which coding agents a plan serves, and whether it serves them all (``ok``)."""

    sentence: str
    ok: bool


def agents_verdict(agents: Sequence[Served], max_model_len: int, refuses_tools: bool) -> Verdict | None:
    """The plan's verdict on ``agents`` in one sentence: which are served, and, for those that are not, the one
    reason: an engine that ``refuses_tools`` (no tool-call parser: every agent sends tools), else the context
    each needs against ``max_model_len`` tokens, with what would serve them. None without agents (a plan that did
    not judge them)."""
    if not agents:
        return None
    served = [a.name for a in agents if a.serves]
    missed = [a for a in agents if not a.serves]
    tight = [a for a in agents if a.serves and a.room is not None]
    if not missed and not tight:
        return Verdict(f"{_names(served)} {_is(served)} served.", True)
    if not missed:
        rooms = " and ".join(f"{a.name} about {a.room:,}" for a in tight)
        return Verdict(
            f"{_names(served)} {_is(served)} served, but the context leaves little after the first request's prompt"
            f" ({rooms} tokens for a whole task's turns), which a task of a few turns fills.",
            False,
        )
    if refuses_tools:
        why = (
            "without a tool-call parser this engine refuses every request that carries tools, which agents send; "
            "choosing one serves them"
        )
    else:
        first, *rest = missed
        needs = " and ".join(
            [f"{first.name}'s first request needs about {first.needed:,} tokens of context"]
            + [f"{a.name}'s about {a.needed:,}" for a in rest]
        )
        most, them = max(a.needed for a in missed), "them" if rest else "it"
        why = (
            f"{needs}, more than the {max_model_len:,} this plan has; a max_model_len of {most:,} or more serves "
            f"{them}, where the model's context and the memory allow"
        )
    if served:
        missing = [a.name for a in missed]
        return Verdict(f"{_names(served)} {_is(served)} served; {_names(missing)} {_is(missing)} not: {why}.", False)
    return Verdict(f"No coding agent is served: {why}.", False)


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _is(names: list[str]) -> str:
    return "is" if len(names) == 1 else "are"
