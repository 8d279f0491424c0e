"""What the gateway records about each request: a RequestLog row (``row_of``; gateway.ledger sees that it is
written once, whatever happens) and the appliance's Prometheus metrics (``count``).

Metrics (served at /metrics for an external Prometheus): requests by model, surface and status; outcomes
(console.observability.outcomes); truncated streams; user-visible TTFT (buckets up to an hour: reasoning models
think for minutes) and ITL of served requests; tokens by model and API key prefix (never the key itself); and what
agents need watched, by model and key prefix (gateway.answers): hidden reasoning tokens, tool-call parse
failures, length-cut answers and empty ones.
"""

import logging
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from prometheus_client import Counter, Histogram

from console.observability.outcomes import SERVED, inter_token_seconds, outcome_of
from console.observability.request_rows import COLUMNS, NANO, Row, write_rows
from gateway.answers import AnswerCounts

log = logging.getLogger(__name__)

ERROR_CHARS = 500  # RequestLog.error's length
REQUESTS = Counter("hearth_gateway_requests", "Gateway requests", ["model", "surface", "status"])
TRUNCATED = Counter(
    "hearth_gateway_truncated_streams", "Streams the engine ended without their terminal event", ["model"]
)
TTFT = Histogram(
    "hearth_gateway_time_to_first_token_seconds",
    "Until the first generated token reached the client",
    ["model"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600),
)
ITL = Histogram(
    "hearth_gateway_inter_token_latency_seconds",
    "(duration - TTFT) / (tokens - 1), served requests",
    ["model"],
    buckets=(0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 5, 10),
)
OUTCOMES = Counter(
    "hearth_gateway_request_outcomes",
    "Requests by how they ended (success, length, empty, cancelled, truncated, refused, error)",
    ["model", "outcome"],
)
TOKENS = Counter("hearth_gateway_tokens", "Tokens used", ["model", "key_prefix", "kind"])
REASONING_TOKENS = Counter(
    "hearth_gateway_reasoning_tokens", "Hidden reasoning tokens the engine generated", ["model", "key_prefix"]
)
TOOL_CALL_FAILURES = Counter(
    "hearth_gateway_tool_call_parse_failures",
    "Tool calls whose arguments were not a JSON object, or written as text",
    ["model", "key_prefix"],
)
LENGTH_CUT = Counter(
    "hearth_gateway_length_cut_answers", "Answers cut by their output-token limit", ["model", "key_prefix"]
)
EMPTY = Counter(
    "hearth_gateway_empty_answers", "Finished answers with neither text nor a tool call", ["model", "key_prefix"]
)


__all__ = ["COLUMNS", "Outcome", "count", "count_refusal", "new_request_id", "row_of", "write"]


def new_request_id() -> str:
    """A request's id: 32 hex digits, random."""
    return uuid.uuid4().hex


@dataclass
class Outcome:
    """How one request ended; filled in by the relay."""

    key_id: int | None
    key_prefix: str
    model: str
    surface: str
    endpoint: str
    stream: bool
    status: int = 0
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    ttft_seconds: float | None = None
    duration_seconds: float = 0.0
    truncated: bool = False
    client_cancelled: bool = False
    usage_estimated: bool = False  # no usage from the engine: counted by the gateway (a stream cut or left)
    counts: AnswerCounts = field(default_factory=AnswerCounts)
    ended_at: float = 0.0  # Unix seconds, set by ``count``: the row's created_at
    cost_usd: Decimal | None = None  # USD charged to the key's budgets (gateway.reservations); None: no price
    request_id: str = field(default_factory=new_request_id)  # the row's, unique (gateway.ledger)
    client_request_id: str | None = None  # the client's x-request-id, when it sent a usable one (gateway.request_ids)
    woke_engine: bool = False  # held for its deployment's wake first (gateway.holding)
    wake_seconds: float | None = None  # how long it was held
    priority: str = "standard"  # the class it ran at (gateway.relay_plan.RelayPlan.priority)
    batch_id: str = ""  # the Batch (batch_...) it was a line of; "" otherwise
    error: str = ""  # why it failed, as its client was told (gateway.errors' message); "" when it did not
    max_tokens_fitted: int | None = None  # the output limit sent, lowered to fit the context; None: as asked
    max_tokens_capped: int | None = None  # the output limit sent, lowered or set by a cap; None: no cap applied
    max_tokens_capped_by: str = ""  # whose cap: key, deployment, limit or budget (gateway.rewrite.capped_header)

    def tokens(self) -> tuple[int | None, int | None, int | None]:
        """(prompt, completion, cached) from any of the three APIs' usage objects: OpenAI chat's
        ``prompt_tokens`` (with ``prompt_tokens_details.cached_tokens``), Responses' ``input_tokens`` (with
        ``input_tokens_details.cached_tokens``), Anthropic's ``input_tokens`` + ``cache_read_input_tokens`` +
        ``cache_creation_input_tokens`` (its input_tokens leaves the cached part out)."""
        u = self.usage
        completion = u.get("completion_tokens", u.get("output_tokens"))
        if "prompt_tokens" in u:
            return u["prompt_tokens"], completion, (u.get("prompt_tokens_details") or {}).get("cached_tokens")
        if isinstance(u.get("input_tokens_details"), dict):
            return u.get("input_tokens"), completion, u["input_tokens_details"].get("cached_tokens")
        prompt, cached = u.get("input_tokens"), u.get("cache_read_input_tokens")
        if isinstance(prompt, int):
            prompt += (cached or 0) + (u.get("cache_creation_input_tokens") or 0)
        return prompt, completion, cached


def count_refusal(surface: str, status: int, model: str = "", deployed: Collection[str] = ()) -> None:
    """Count a request the gateway refused before choosing an engine (bad key, unknown model, a model not ready,
    ...), or whose client left before its body was whole (499): under the ``model`` its body named when that is one
    of the ``deployed`` models, in its outcomes too, as its request-log row counts on the panels (a trial's 503s for
    a model still loading were model "" and no outcome, so a per-model error-rate alert missed them); else under "",
    as a name a client made up would be a label for ever."""
    label = model if model in deployed else ""
    REQUESTS.labels(label, surface, str(status)).inc()
    if label:
        OUTCOMES.labels(label, outcome_of(status, None, False, False, None)).inc()


def count(outcome: Outcome) -> None:
    """Count the request in the metrics, and note when it ended (``ended_at``)."""
    REQUESTS.labels(outcome.model, outcome.surface, str(outcome.status)).inc()
    if outcome.truncated:
        TRUNCATED.labels(outcome.model).inc()
    prompt, completion, _ = outcome.tokens()
    ended = outcome_of(outcome.status, outcome.finish_reason, outcome.truncated, outcome.client_cancelled, completion)
    OUTCOMES.labels(outcome.model, ended).inc()
    if outcome.ttft_seconds is not None and ended in SERVED:
        TTFT.labels(outcome.model).observe(outcome.ttft_seconds)
        itl = inter_token_seconds(outcome.ttft_seconds, outcome.duration_seconds, completion)
        if itl is not None:
            ITL.labels(outcome.model).observe(itl)
    for kind, count in (("prompt", prompt), ("completion", completion)):
        if count:
            TOKENS.labels(outcome.model, outcome.key_prefix, kind).inc(count)
    _count_answer(outcome)
    outcome.ended_at = time.time()


def _count_answer(outcome: Outcome) -> None:
    """The agent counters of a relayed answer (refusals and errors hold no answer to count)."""
    if outcome.status != 200:
        return
    counts, labels = outcome.counts, (outcome.model, outcome.key_prefix)
    if counts.reasoning_tokens:
        REASONING_TOKENS.labels(*labels).inc(counts.reasoning_tokens)
    if counts.tool_call_failures:
        TOOL_CALL_FAILURES.labels(*labels).inc(counts.tool_call_failures)
    if counts.length_cut:
        LENGTH_CUT.labels(*labels).inc()
    if counts.empty and not outcome.truncated and not outcome.client_cancelled:
        EMPTY.labels(*labels).inc()


def write(batch: list[Outcome]) -> int:
    """Write the batch's rows straight to the database (console.observability.request_rows.write_rows: once per
    request id); the rows written. Raises what the driver raises."""
    return write_rows([row_of(o) for o in batch])


def row_of(o: Outcome) -> Row:
    """The request's RequestLog row (console.observability.request_rows), its cost in nano-USD."""
    prompt, completion, cached = o.tokens()
    answered = o.status == 200  # refusals and errors hold no answer to count
    c = o.counts if answered else AnswerCounts()
    return {
        "request_id": o.request_id,
        "client_request_id": o.client_request_id,
        "created_at": o.ended_at,
        "api_key_id": o.key_id,
        "model": o.model,
        "surface": o.surface,
        "endpoint": o.endpoint,
        "stream": o.stream,
        "status": o.status,
        "finish_reason": o.finish_reason or "",
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": cached,
        "ttft_seconds": o.ttft_seconds,
        "duration_seconds": o.duration_seconds,
        "truncated": o.truncated,
        "client_cancelled": o.client_cancelled,
        "usage_estimated": o.usage_estimated,
        "reasoning_tokens": c.reasoning_tokens,
        "tool_call_failures": c.tool_call_failures,
        "length_cut": c.length_cut,
        "empty_answer": c.empty and not o.truncated and not o.client_cancelled,
        "cost_usd": None if o.cost_usd is None else int(o.cost_usd * NANO),
        "key_prefix": o.key_prefix,
        "woke_engine": o.woke_engine,
        "wake_seconds": o.wake_seconds,
        "priority": o.priority,
        "batch_id": o.batch_id,
        "error": o.error[:ERROR_CHARS],
        "max_tokens_fitted": o.max_tokens_fitted,
        "max_tokens_capped": o.max_tokens_capped,
        "max_tokens_capped_by": o.max_tokens_capped_by,
    }
