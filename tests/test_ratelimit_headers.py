"""The rate-limit headers an admitted request's answer, or a limit's 429, carries (gateway.ratelimit_headers), in
OpenAI's and Anthropic's names and formats. Through real gateway processes: tests/test_gateway_quotas.py."""

from datetime import UTC, datetime

from gateway.errors import Surface
from gateway.quotas import Quota
from gateway.ratelimit_headers import ratelimit_headers

NOW = datetime(2026, 12, 7, 10, 59, 26, 500000, tzinfo=UTC).timestamp()  # 33.5 s before the minute turns


def _named(headers: tuple[tuple[bytes, bytes], ...]) -> dict[str, str]:
    return {name.decode(): value.decode() for name, value in headers}


def test_openai_names_with_a_duration_to_each_windows_turn() -> None:
    quota = Quota(requests_per_minute=50, tokens_per_minute=40_000, tokens_per_day=1_000_000)
    assert _named(ratelimit_headers(quota, (8, 22_000, 90_000), Surface.OPENAI, NOW)) == {
        "x-ratelimit-limit-requests": "50",
        "x-ratelimit-remaining-requests": "42",
        "x-ratelimit-reset-requests": "34s",
        "x-ratelimit-limit-tokens": "40000",
        "x-ratelimit-remaining-tokens": "18000",
        "x-ratelimit-reset-tokens": "34s",
    }


def test_anthropic_names_with_the_time_each_window_turns() -> None:
    quota = Quota(requests_per_minute=50, tokens_per_day=1_000_000)  # no per-minute tokens: the day's are told
    assert _named(ratelimit_headers(quota, (50, 0, 1_200_000), Surface.ANTHROPIC, NOW)) == {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-12-07T11:00:00Z",
        "anthropic-ratelimit-tokens-limit": "1000000",
        "anthropic-ratelimit-tokens-remaining": "0",  # a reservation over what is left never reads as negative
        "anthropic-ratelimit-tokens-reset": "2026-12-08T00:00:00Z",
    }


def test_a_day_window_is_written_in_hours_minutes_and_seconds() -> None:
    headers = _named(ratelimit_headers(Quota(tokens_per_day=5000), (0, 0, 100), Surface.OPENAI, NOW))
    assert headers == {
        "x-ratelimit-limit-tokens": "5000",
        "x-ratelimit-remaining-tokens": "4900",
        "x-ratelimit-reset-tokens": "13h0m34s",
    }


def test_a_key_without_a_request_or_token_limit_gets_none() -> None:
    assert ratelimit_headers(Quota(max_concurrent=2), (1, 0, 0), Surface.OPENAI, NOW) == ()
    assert ratelimit_headers(Quota(), (1, 0, 0), Surface.ANTHROPIC, NOW) == ()
