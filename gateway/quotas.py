"""A key's limits and budgets, what a request reserves against them, and the 429 that refuses it.

Limits (None: unlimited): requests per minute, tokens per minute (fixed one-minute windows), tokens per UTC
day, requests at once; budgets in USD per UTC day and per UTC calendar month, the key's own and its owner
member's (totals over all of that person's keys). gateway.reservations holds them in Redis; this module
decides what one request reserves and words the refusals.

A request reserves, at admission, its prompt (counted by the engine's ``/tokenize``; without a count, the
bound gateway.context_fit uses) plus the most it may generate: its output limit after the key's and the
deployment's caps, else what the engine defaults to (16 for /v1/completions, as vLLM and SGLang do; the
context left for the other endpoints), times the choices it asks for (``n``, ``best_of``, a list of prompts).
A request that asks for no output limit on a key whose token limits or budgets (at the deployment's price) have
less left than that reservation gets the output limit what is left leaves after its prompt, and one that asks for
more than the whole of a limit or budget holds gets what the whole leaves (``output_within_limit``): the context
left of a 32K model is over a 10,000-token-per-minute key, tools such as llm and aider send no ``max_tokens``, and
Claude Code's own cannot be set.
A request whose reservation is over a token limit or a budget not yet spent even so (its prompt alone) can never pass:
it is a 400 (code ``exceeds_key_limit`` or ``exceeds_key_budget``) that says so, which SDKs do not retry.
"""

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ObjectDoesNotExist

from console.access.key_activity import FEWER_OUTPUT_TOKENS
from console.access.models import ApiKey
from gateway.charges import priced
from gateway.errors import NO_RETRY, GatewayError
from gateway.rewrite import output_limit

NANO = Decimal(1_000_000_000)  # counters hold USD in nano-USD integers: exact sums, $9 million in a Lua double
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # vllm/entrypoints/openai/completion/protocol.py; SGLang's CompletionRequest
CONCURRENCY_RETRY = 1  # seconds: a slot frees when any request of the key ends
RETRY_WITHIN = 60  # seconds: a refusal whose window turns later tells clients not to retry (_no_retry_past_a_minute)


@dataclass(frozen=True)
class Quota:
    """A key's limits and budgets (None: none), and whose member budgets also apply (``owner_id``: a user id)."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None
    max_concurrent: int | None = None
    daily_usd: Decimal | None = None
    monthly_usd: Decimal | None = None
    owner_id: int | None = None
    owner_daily_usd: Decimal | None = None
    owner_monthly_usd: Decimal | None = None

    @property
    def any(self) -> bool:
        """Whether requests need Redis before they may start."""
        return self.requests_per_minute is not None or self.max_concurrent is not None or self.counts_tokens

    @property
    def counts_tokens(self) -> bool:
        """Whether admission needs the request's tokens: a token limit or a budget."""
        return any(v is not None for v in (self.tokens_per_minute, self.tokens_per_day, *self.budgets()))

    def budgets(self) -> tuple[Decimal | None, Decimal | None, Decimal | None, Decimal | None]:
        """(key daily, key monthly, owner daily, owner monthly) USD."""
        return self.daily_usd, self.monthly_usd, self.owner_daily_usd, self.owner_monthly_usd


def quota_of(key: ApiKey) -> Quota:
    """The key's quota, with its owner's member budgets (read ``key.owner.member``: select_related it)."""
    member = None
    if key.owner is not None:
        try:
            member = key.owner.member
        except ObjectDoesNotExist:  # a user without a member row has no member budgets
            member = None
    return Quota(
        key.requests_per_minute,
        key.tokens_per_minute,
        key.tokens_per_day,
        key.max_concurrent,
        key.daily_budget_usd,
        key.monthly_budget_usd,
        key.owner_id,
        member.daily_budget_usd if member else None,
        member.monthly_budget_usd if member else None,
    )


def tokens_to_reserve(path: str, request: dict[str, Any], prompt: int, max_model_len: int) -> int:
    """Prompt plus the most the request may generate (module docstring), in tokens; ``request`` carries
    the output limit the engine will get."""
    limit = output_limit(path, request)
    if limit is None:  # embeddings, count_tokens: nothing generated
        return prompt
    asked = limit[1]
    if asked is None:
        asked = COMPLETIONS_DEFAULT_MAX_TOKENS if path == "/v1/completions" else max(max_model_len - prompt, 0)
    return prompt + asked * _choices(path, request)


@dataclass(frozen=True)
class Used:
    """What a key's counters hold (gateway.reservations): tokens this minute and this UTC day, and nano-USD of its
    budgets in Quota.budgets' order, its running requests' reservations counted."""

    tokens_per_minute: int = 0
    tokens_per_day: int = 0
    budgets: tuple[int, int, int, int] = (0, 0, 0, 0)


def output_within_limit(
    path: str,
    request: dict[str, Any],
    prompt: int,
    max_model_len: int,
    quota: Quota,
    price: str = "",
    used: Used | None = None,
) -> tuple[dict[str, int], str]:
    """The output limit field (``max_tokens`` or the endpoint's own) lowered or set, in tokens shared by the choices,
    for a request that would otherwise reserve more than its key's smallest token limit (per minute, per day) or
    smallest budget holds at ``price`` (USD per token as admission prices it, gateway.prices.scaled: a decimal
    string, or "input,output"; "" none published, so no budget is judged). A request whose client asked for none
    (``used`` given: what the counters hold now; its field may hold a cap an admin set) gets what is left of them
    now after its prompt: tools such as llm, aider and Codex send none, and reserving the whole context refused all
    but one request a minute; with nothing left after its prompt it gets 1, so that admission answers a 429 that
    says when the window renews, not a 400 blaming a size the client never asked for. One that asks for more than
    the whole of a limit or budget can hold gets what the whole leaves after its prompt, so it can pass (Claude
    Code's 32,000 on a 30,000-token-per-minute key was refused every time, and its user cannot set it). With which
    set it: "limit" or "budget", the lower where both do. ({}, "") when nothing applies, the reservation fits, the
    prompt alone is over the whole of a limit or budget, or the asked value is not a whole number (the engine says
    what is wrong with it)."""
    limit = output_limit(path, request)
    if limit is None:
        return {}, ""
    asked = request.get(limit[0])
    if asked is not None and (not isinstance(asked, int) or isinstance(asked, bool)):
        return {}, ""
    held = used if used is not None else Used()
    reserve, choices = tokens_to_reserve(path, request, prompt, max_model_len), _choices(path, request)
    bounds: list[tuple[int, str]] = []
    tokens = [
        n - u
        for n, u in ((quota.tokens_per_minute, held.tokens_per_minute), (quota.tokens_per_day, held.tokens_per_day))
        if n is not None
    ]
    if tokens and reserve > min(tokens):
        bounds.append(((min(tokens) - prompt) // choices, "limit"))
    budgets = [to_nano(b) - u for b, u in zip(quota.budgets(), held.budgets, strict=True) if b is not None]
    if budgets and price and _reserved_nano(price, reserve, prompt) > min(budgets):
        bounds.append((_affordable(price, min(budgets), prompt) // choices, "budget"))
    each, by = min(bounds, default=(0, ""))
    if each <= 0 and by and used is not None:
        each = 1
    return ({limit[0]: each}, by) if each > 0 else ({}, "")


def _reserved_nano(price: str, tokens: int, prompt: int) -> int:
    """What admission reserves for ``tokens`` tokens, ``prompt`` of them the prompt's, at ``price``: nano-USD
    rounded up, as its script rounds (gateway.reservations)."""
    return math.ceil(priced(tokens, price, prompt) * 1e9)


def _affordable(price: str, budget: int, prompt: int) -> int:
    """The most tokens after a prompt of ``prompt`` tokens whose reservation ``budget`` nano-USD holds at ``price``
    (0 when the prompt alone is over it)."""
    output = float(price.rpartition(",")[2])
    if output <= 0:
        return 0
    most = max(int((budget - _reserved_nano(price, prompt, prompt)) / 1e9 / output), 0)
    while most > 0 and _reserved_nano(price, prompt + most, prompt) > budget:  # the doubles' rounding
        most -= 1
    return most


def _choices(path: str, request: dict[str, Any]) -> int:
    choices = max(_int(request.get("n")), _int(request.get("best_of")))
    if path == "/v1/completions" and isinstance(request.get("prompt"), list):
        choices *= max(len(request["prompt"]), 1)
    return choices


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def to_nano(usd: Decimal) -> int:
    return int(usd * NANO)


def usd_text(nano: int) -> str:
    """Nano-USD as dollars: to the cent from $1 and for whole cents (a budget of $0.30, as the console writes it),
    else to four significant digits."""
    usd = Decimal(nano) / NANO
    return f"${usd:,.2f}" if usd >= 1 or usd * 100 % 1 == 0 else f"${float(usd):.4g}"


# What each counter of gateway.reservations is, in its order: (what, window)
LIMITS = (
    ("requests per minute", "minute"),
    ("tokens per minute", "minute"),
    ("tokens per day", "day"),
    ("requests at once", "concurrent"),
)
BUDGETS = (
    ("this key's daily budget", "day"),
    ("this key's monthly budget", "month"),
    ("the daily budget of this key's owner (over all their keys)", "day"),
    ("the monthly budget of this key's owner (over all their keys)", "month"),
)


def seconds_to_turn(window: str, now: float) -> int:
    """Whole seconds (at least 1) until the UTC minute, day or calendar month that holds ``now`` ends."""
    if window == "minute":
        return max(1, math.ceil(60 - now % 60))
    if window == "day":
        return max(1, math.ceil(86400 - now % 86400))
    if window == "month":
        at = datetime.fromtimestamp(now, UTC)
        turn = datetime(at.year + at.month // 12, at.month % 12 + 1, 1, tzinfo=UTC)
        return max(1, math.ceil(turn.timestamp() - now))
    return CONCURRENCY_RETRY


@dataclass(frozen=True)
class Refused(GatewayError):
    """A 429 of a key's limit or budget, with the key's counters as admission read them, this request not in:
    requests this minute, tokens this minute, tokens this UTC day (its rate-limit headers: gateway.ledger)."""

    counted: tuple[int, int, int] = (0, 0, 0)


@dataclass(frozen=True)
class SlotsTaken(Refused):
    """The 429 of a key's limit of requests at once: gateway.slot_waits may wait for a slot a client just left
    before it is answered."""


def refusal(
    index: int,
    limit: int,
    used: int,
    wanted: int,
    now: float,
    counted: tuple[int, int, int] = (0, 0, 0),
    least: int = 0,
) -> GatewayError:
    """The refusal of counter ``index`` (LIMITS then BUDGETS, from 0) whose ``limit`` would be passed: a Refused
    429, or a 400 when the request alone is over it. ``used`` is already counted or reserved, ``wanted`` what the
    request would add (USD counters in nano-USD), ``counted`` the Refused's, ``least`` the least the request may
    cost, its prompt and one output token (nano-USD; a budget's words)."""
    if index >= len(LIMITS):
        return _over_budget(index - len(LIMITS), limit, used, (wanted, least), now, counted)
    what, window = LIMITS[index]
    if what.startswith("tokens") and used < limit < wanted:  # no retry can pass: a 400, which SDKs do not retry
        return GatewayError(
            400,
            f"This request needs up to {wanted:,} tokens (its prompt and output limit), more "
            f"than this API key's limit of {limit:,} {what}; ask for fewer output tokens (max_tokens) or send a "
            "shorter prompt.",
            code="exceeds_key_limit",
        )
    retry = seconds_to_turn(window, now)
    state = (
        "is reached"
        if used >= limit
        else (f"has {limit - used:,} left, fewer than this request may use ({wanted:,}: its prompt and output limit)")
    )
    noun = what if limit != 1 else what.replace("s ", " ", 1)  # "1 request at once", "1 token per minute"
    message = f"This API key's limit of {limit:,} {noun} {state}; retry in {retry:,} s{_at(now, retry)}."
    kind = SlotsTaken if window == "concurrent" else Refused
    headers = _no_retry_past_a_minute(retry)
    return kind(
        429,
        message,
        type="rate_limit_error",
        code="rate_limit_exceeded",
        retry_after=retry,
        headers=headers,
        counted=counted,
    )


def _no_retry_past_a_minute(retry: int) -> tuple[tuple[bytes, bytes], ...]:
    """``x-should-retry: false`` for a refusal whose window turns in more than RETRY_WITHIN seconds (a day's limit, a
    budget): the SDKs wait at most a minute of a Retry-After, so OpenCode, cn and aider retried a spent daily budget
    for minutes, silent, in a trial; a wait within a minute is theirs to take."""
    return NO_RETRY if retry > RETRY_WITHIN else ()


def _at(now: float, retry: int) -> str:
    """When a wait of more than a minute ends, in UTC, for the refusal's message."""
    if retry <= RETRY_WITHIN:
        return ""
    return f" (at {datetime.fromtimestamp(now + retry, UTC):%Y-%m-%d %H:%M} UTC)"


def _over_budget(
    index: int, limit: int, used: int, costs: tuple[int, int], now: float, counted: tuple[int, int, int]
) -> GatewayError:
    """``costs``: what the request may cost and the least it may, its prompt and one output token, nano-USD.
    OpenAI's type and code for a spent quota are ``insufficient_quota`` (its "Error codes" guide)."""
    (what, window), (wanted, least) = BUDGETS[index], costs
    budget, retry = f"{what} of {usd_text(limit)}", seconds_to_turn(window, now)
    if used < limit < wanted:  # no retry can pass: a 400, which SDKs do not retry
        message = f"This request could cost up to {usd_text(wanted)}, more than all of {budget}; ask for fewer tokens."
        return GatewayError(400, message, code="exceeds_key_budget")
    left = f"has {usd_text(limit - used)} left, less than this request may cost (up to {usd_text(wanted)}: its prompt"
    if used >= limit:
        state = "is spent"
    elif least > limit - used:  # no output limit passes: trials were told to lower max_tokens, already 1
        state = f"{left} with one output token may cost {usd_text(least)}); send a shorter prompt to pass now"
    else:
        state = f"{left} and output limit); {FEWER_OUTPUT_TOKENS}"
    message = f"{budget[0].upper()}{budget[1:]} {state}; it renews in {retry:,} s{_at(now, retry)}."
    headers = _no_retry_past_a_minute(retry)
    return Refused(
        429,
        message,
        type="insufficient_quota",
        code="insufficient_quota",
        retry_after=retry,
        headers=headers,
        counted=counted,
    )


def store_unreachable(retry_after: int) -> GatewayError:
    """503 for a key whose limits or budgets cannot be judged: Redis does not answer."""
    return GatewayError(
        503,
        f"This API key's limits are kept in Redis, which does not answer; retry in {retry_after} s.",
        type="server_error",
        code="quota_store_unavailable",
        retry_after=retry_after,
    )
