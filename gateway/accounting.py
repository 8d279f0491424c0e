"""What the gateway records about each request: a RequestLog row and the appliance's Prometheus metrics.

Metrics (served at /metrics for an external Prometheus): requests by model, surface and status; outcomes
(console.observability.outcomes); truncated streams; user-visible TTFT (buckets up to an hour: reasoning models
think for minutes) and ITL of served requests; tokens by model and API key prefix (never the key itself); and what
agents need watched, by model and key prefix (gateway.answers): hidden reasoning tokens, tool-call parse
failures, length-cut answers and empty ones.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection, transaction
from prometheus_client import Counter, Histogram

from console.observability.models import RequestLog
from console.observability.outcomes import SERVED, inter_token_seconds, outcome_of
from gateway.answers import AnswerCounts

log = logging.getLogger(__name__)

REQUESTS = Counter("hearth_gateway_requests", "Gateway requests", ["model", "surface", "status"])
TRUNCATED = Counter("hearth_gateway_truncated_streams", "Streams the engine ended without their terminal event",
                    ["model"])  # fmt: skip
TTFT = Histogram("hearth_gateway_time_to_first_token_seconds", "Until the first generated token reached the client",
                 ["model"], buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200,
                                     1800, 3600))  # fmt: skip
ITL = Histogram("hearth_gateway_inter_token_latency_seconds", "(duration - TTFT) / (tokens - 1), served requests",
                ["model"], buckets=(0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 5,
                                    10))  # fmt: skip
OUTCOMES = Counter("hearth_gateway_request_outcomes", "Requests by how they ended (success, length, empty, cancelled, "
                   "truncated, refused, error)", ["model", "outcome"])  # fmt: skip
TOKENS = Counter("hearth_gateway_tokens", "Tokens used", ["model", "key_prefix", "kind"])
REASONING_TOKENS = Counter("hearth_gateway_reasoning_tokens", "Hidden reasoning tokens the engine generated",
                           ["model", "key_prefix"])  # fmt: skip
TOOL_CALL_FAILURES = Counter("hearth_gateway_tool_call_parse_failures",
                             "Tool calls whose arguments were not a JSON object, or written as text",
                             ["model", "key_prefix"])  # fmt: skip
LENGTH_CUT = Counter("hearth_gateway_length_cut_answers", "Answers cut by their output-token limit",
                     ["model", "key_prefix"])  # fmt: skip
EMPTY = Counter("hearth_gateway_empty_answers", "Finished answers with neither text nor a tool call",
                ["model", "key_prefix"])  # fmt: skip


_pending: list["Outcome"] = []
_flusher: asyncio.Future[None] | None = None
FLUSH_EVERY = 0.5  # seconds: rows are made and written in batches, in a worker thread, off the relay's path


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
    ended_at: float = 0.0  # Unix seconds, set by ``record``: the row's created_at
    cost_usd: Decimal | None = None  # USD charged to the key's budgets (gateway.reservations); None: no price

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


def count_refusal(surface: str, status: int) -> None:
    """Count a request the gateway refused before choosing an engine (bad key, unknown model, ...)."""
    REQUESTS.labels("", surface, str(status)).inc()


async def record(outcome: Outcome) -> None:
    """Count the request in the metrics and queue it for the next batch of RequestLog rows."""
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
    _pending.append(outcome)
    global _flusher
    if _flusher is None or _flusher.done():
        _flusher = asyncio.ensure_future(_flush_soon())


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


async def _flush_soon() -> None:
    await asyncio.sleep(FLUSH_EVERY)
    await flush()


async def flush() -> None:
    """Write the pending requests' RequestLog rows in one batch (also called at shutdown)."""
    batch = _pending[:]
    del _pending[:]
    if not batch:
        return
    try:
        await sync_to_async(write, thread_sensitive=False)(batch)
    except Exception:  # the answers are already out: a lost log row must not turn into an error
        log.exception("could not write %d request log rows", len(batch))


def write(batch: list[Outcome]) -> None:
    """Insert the batch's rows with one prepared statement (``executemany``): a third of what
    ``bulk_create`` costs per row (~20 against ~55 µs, on SQLite and PostgreSQL), in a thread that holds
    the event loop's GIL while it runs Python."""
    ops = connection.ops
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(_insert_sql(), [_values(o, ops.adapt_datetimefield_value) for o in batch])


# RequestLog's columns, in the order _values gives them (a test checks that they are all of its columns)
COLUMNS = ("created_at", "api_key_id", "model", "surface", "endpoint", "stream", "status", "finish_reason",
           "prompt_tokens", "completion_tokens", "cached_tokens", "ttft_seconds", "duration_seconds", "truncated",
           "client_cancelled", "usage_estimated", "reasoning_tokens", "tool_call_failures", "length_cut",
           "empty_answer", "cost_usd", "key_prefix")  # fmt: skip


@cache
def _insert_sql() -> str:
    quote = connection.ops.quote_name
    columns, values = ", ".join(quote(c) for c in COLUMNS), ", ".join(["%s"] * len(COLUMNS))
    # identifiers from this module and the model, quoted; every value goes in as a parameter
    return f"INSERT INTO {quote(RequestLog._meta.db_table)} ({columns}) VALUES ({values})"  # noqa: S608


def _values(o: Outcome, adapt_datetime: Callable[[datetime], Any]) -> tuple[Any, ...]:
    prompt, completion, cached = o.tokens()
    answered = o.status == 200  # refusals and errors hold no answer to count
    c = o.counts if answered else AnswerCounts()
    empty = c.empty and not o.truncated and not o.client_cancelled
    return (adapt_datetime(datetime.fromtimestamp(o.ended_at, UTC)), o.key_id, o.model, o.surface, o.endpoint,
            o.stream, o.status, o.finish_reason or "", prompt, completion, cached, o.ttft_seconds,
            o.duration_seconds, o.truncated, o.client_cancelled, o.usage_estimated, c.reasoning_tokens,
            c.tool_call_failures, c.length_cut, empty, o.cost_usd, o.key_prefix)  # fmt: skip
