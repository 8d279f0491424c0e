"""How a request ended, in the words the panels and Hearth's /metrics use (no Django, no I/O: the gateway's
accounting imports it too).

Outcomes: ``success``; ``length`` (succeeded but cut at max_tokens or the context); ``empty`` (succeeded with no
generated token); ``cancelled`` (the client went away); ``truncated`` (the engine's stream ended without its
terminal event); ``refused`` (answered 4xx: a bad key, an unknown model, a context-length rejection, a quota);
``error`` (5xx, or an engine that failed). Errors (ERRORS: engine errors and truncated streams) are the service's
failures; refusals are answers to the client's own request (its key, its quota, its prompt's length) and are
counted apart (REFUSALS), so a client's 400 never reads as an outage. Neither is speed: only requests that
produced tokens (success, length) feed TTFT, ITL and goodput.
"""

from dataclasses import dataclass

OUTCOMES = ("success", "length", "empty", "cancelled", "truncated", "refused", "error")
# A length cut in each API's words: OpenAI's finish_reason, Anthropic's stop_reason, a Responses answer's
# incomplete_details.reason (what the gateway logs as finish_reason, gateway.answers.responses_finish).
LENGTH_CUTS = ("length", "max_tokens", "max_output_tokens")
ERRORS = frozenset({"truncated", "error"})  # the service failed the request
REFUSALS = frozenset({"refused"})  # the request was refused with a 4xx: the client's to fix
SERVED = frozenset({"success", "length"})  # produced an answer: their latencies are speed


def outcome_of(
    status: int, finish_reason: str | None, truncated: bool, client_cancelled: bool, completion_tokens: int | None
) -> str:
    """The outcome of one request (see the module docstring), from what the gateway recorded."""
    if client_cancelled:
        return "cancelled"
    if truncated:
        return "truncated"
    if 400 <= status < 500:
        return "refused"
    if status >= 500 or status == 0:
        return "error"
    if finish_reason in LENGTH_CUTS:
        return "length"
    if completion_tokens == 0:
        return "empty"
    return "success"


def inter_token_seconds(ttft: float | None, duration: float, completion_tokens: int | None) -> float | None:
    """A request's mean inter-token latency as its client saw it: (duration − TTFT) / (tokens − 1), seconds;
    None with fewer than two tokens or no TTFT. The same definition AIPerf and GenAI-Perf report as ITL."""
    if ttft is None or not completion_tokens or completion_tokens < 2:
        return None
    return max(duration - ttft, 0.0) / (completion_tokens - 1)


@dataclass(frozen=True)
class Slo:
    """Targets in seconds (None: not checked)."""

    ttft_seconds: float | None = None
    itl_seconds: float | None = None

    @property
    def any(self) -> bool:
        return self.ttft_seconds is not None or self.itl_seconds is not None

    def met(self, outcome: str, ttft: float | None, itl: float | None) -> bool:
        """Whether a request met the SLO: served (SERVED), and within each target that is set."""
        if outcome not in SERVED:
            return False
        if self.ttft_seconds is not None and (ttft is None or ttft > self.ttft_seconds):
            return False
        return not (self.itl_seconds is not None and itl is not None and itl > self.itl_seconds)
