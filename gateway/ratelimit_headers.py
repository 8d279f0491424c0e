"""The rate-limit headers of an answer, in its API's own names, for a key with a request or token limit: the limit,
what it leaves (after an admitted request, its reservation counted: gateway.quotas; on a limit's or budget's 429,
what is left without it), and when its window turns. Clients and proxies read them to pace themselves (LiteLLM's
router, the SDKs' users); a key without such a limit gets none, as before.

OpenAI (its rate-limits guide): ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests``,
``x-ratelimit-reset-requests`` (a duration: "34s", "6m0s", "1h2m3s"), the same three for ``tokens``. Anthropic (its
rate-limits page): ``anthropic-ratelimit-requests-limit``, ``-remaining``, ``-reset`` (an RFC 3339 time in UTC), the
same three for ``tokens``. Requests: the key's requests per minute. Tokens: its tokens per minute, else per UTC day
(a day's window turns at midnight). Windows are the fixed ones the limits count in (gateway.quotas).
"""

from datetime import UTC, datetime

from gateway.errors import Surface
from gateway.quotas import Quota, seconds_to_turn

Header = tuple[bytes, bytes]


def ratelimit_headers(quota: Quota, counted: tuple[int, int, int], surface: Surface, now: float) -> tuple[Header, ...]:
    """The headers for a request admitted or refused at ``now`` (Unix s) whose key's counters (an admitted one's own
    request and reservation in) hold ``counted``: requests this minute, tokens this minute, tokens this UTC day; ()
    for a key without a request or token limit."""
    requests, tokens_minute, tokens_day = counted
    windows: list[tuple[str, int, int, str]] = []
    if quota.requests_per_minute is not None:
        windows.append(("requests", quota.requests_per_minute, requests, "minute"))
    if quota.tokens_per_minute is not None:
        windows.append(("tokens", quota.tokens_per_minute, tokens_minute, "minute"))
    elif quota.tokens_per_day is not None:
        windows.append(("tokens", quota.tokens_per_day, tokens_day, "day"))
    headers: list[Header] = []
    for what, limit, used, window in windows:
        turn = seconds_to_turn(window, now)
        left = str(max(limit - used, 0))
        if surface == Surface.ANTHROPIC:
            at = datetime.fromtimestamp(int(now) + turn, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            named = [(f"anthropic-ratelimit-{what}-{part}", value) for part, value in _parts(limit, left, at)]
        else:
            named = [(f"x-ratelimit-{part}-{what}", value) for part, value in _parts(limit, left, _duration(turn))]
        headers += [(name.encode(), value.encode()) for name, value in named]
    return tuple(headers)


def _parts(limit: int, left: str, reset: str) -> list[tuple[str, str]]:
    return [("limit", str(limit)), ("remaining", left), ("reset", reset)]


def _duration(seconds: int) -> str:
    """``seconds`` as OpenAI writes a reset: "34s", "6m0s", "1h2m3s"."""
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"
