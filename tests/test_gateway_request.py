"""How the gateway adjusts a request body on its way to the engine: usage asked for, max_tokens capped."""

import asyncio
import json
import time
from decimal import Decimal
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.errors import GatewayError, Surface
from gateway.quotas import Quota, Used, _reserved_nano, output_within_limit, tokens_to_reserve, usd_text
from gateway.registry import KeyEntry, Route, Upstream
from gateway.rewrite import (
    ask_for_usage,
    cap_max_tokens,
    capped_header,
    capped_to,
    output_limit,
    tokenize_request,
    with_fields,
)
from gateway.sse import StreamKind

CHAT = "/v1/chat/completions"


def adjusted(body: bytes, cap: int | None = None) -> tuple[bytes, dict[str, Any]]:
    request = json.loads(body)
    fields = {**cap_max_tokens(CHAT, request, cap), **ask_for_usage(CHAT, request)}
    return with_fields(body, request, fields), request


def test_new_fields_are_appended_to_the_clients_own_text() -> None:
    body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"h\\u00e9"}]}\n'
    out, request = adjusted(body, cap=16)
    assert out.startswith(body.rstrip()[:-1])  # not encoded again (json.dumps would space it)
    assert (
        json.loads(out)
        == request
        == {**json.loads(body), "max_completion_tokens": 16, "stream_options": {"include_usage": True}}
    )


def test_fields_the_client_set_are_changed_in_a_fresh_encoding() -> None:
    body = json.dumps(
        {"model": "m", "stream": True, "max_tokens": 99, "stream_options": {"continuous": True}, "messages": []}
    ).encode()
    out, request = adjusted(body, cap=8)
    assert json.loads(out) == request
    assert request["max_tokens"] == 8 and "max_completion_tokens" not in request
    assert request["stream_options"] == {"continuous": True, "include_usage": True}


def test_a_utf16_body_is_encoded_again_not_spliced() -> None:
    body = json.dumps({"model": "m", "stream": True, "messages": []}).encode("utf-16")
    out, request = adjusted(body)
    assert json.loads(out) == request and request["stream_options"] == {"include_usage": True}


def test_nothing_changes_when_the_client_asked_for_usage_within_the_cap() -> None:
    request = {"model": "m", "stream": True, "max_tokens": 4, "stream_options": {"include_usage": True}}
    assert cap_max_tokens(CHAT, request, 8) == {} and ask_for_usage(CHAT, request) == {}


def test_every_limit_field_a_request_holds_is_capped_not_only_the_first() -> None:
    """SGLang generates ``max_completion_tokens or max_tokens``: a 0 in the first must not hand it the second."""
    request = {"model": "m", "max_completion_tokens": 0, "max_tokens": 100_000}
    assert cap_max_tokens(CHAT, request, 8) == {"max_tokens": 8}
    assert cap_max_tokens(CHAT, {"max_completion_tokens": 50, "max_tokens": 7}, 8) == {"max_completion_tokens": 8}
    assert cap_max_tokens(CHAT, {"max_completion_tokens": 4, "max_tokens": 8}, 8) == {}
    assert cap_max_tokens("/v1/responses", {"max_output_tokens": "999"}, 8) == {"max_output_tokens": 8}
    assert cap_max_tokens("/v1/embeddings", {"max_tokens": 100}, 8) == {}


def test_the_request_log_reads_the_last_cap_a_plan_applied_from_its_headers() -> None:
    """A key's cap, then what its budget leaves: the row says the budget set the limit sent."""
    fitted = (b"x-hearth-max-tokens-fitted", b"900; requested=4000; prompt=7292; max_model_len=8192")
    assert capped_to([fitted]) is None
    headers = [capped_header(None, 4096, "key"), fitted, capped_header(4096, 312, "budget")]
    assert capped_to(headers) == (312, "budget")
    assert capped_to([capped_header(100, 2, "deployment")]) == (2, "deployment")


def test_the_output_limit_is_the_largest_field_held_as_engines_differ_on_which_they_read() -> None:
    assert output_limit(CHAT, {"max_completion_tokens": 0, "max_tokens": 500}) == ("max_tokens", 500)
    assert output_limit(CHAT, {"max_completion_tokens": 40, "max_tokens": 5}) == ("max_completion_tokens", 40)
    assert output_limit(CHAT, {"max_completion_tokens": 40, "max_tokens": "lots"}) == ("max_tokens", None)
    assert output_limit(CHAT, {}) == ("max_completion_tokens", None)
    assert output_limit("/v1/embeddings", {"max_tokens": 5}) is None
    # a key's token quota reserves what SGLang would generate
    assert tokens_to_reserve(CHAT, {"max_completion_tokens": 0, "max_tokens": 500}, 20, 4096) == 520


def test_a_request_asking_no_output_limit_gets_what_the_keys_smaller_token_limit_leaves() -> None:
    tpm, both = Quota(tokens_per_minute=1000), Quota(tokens_per_minute=1000, tokens_per_day=600)
    assert output_within_limit(CHAT, {}, 100, 8192, tpm) == ({"max_completion_tokens": 900}, "limit")
    assert output_within_limit(CHAT, {}, 100, 8192, both) == ({"max_completion_tokens": 500}, "limit")
    assert output_within_limit(CHAT, {"n": 3}, 100, 8192, tpm) == ({"max_completion_tokens": 300}, "limit")  # each
    assert output_within_limit("/v1/responses", {}, 100, 8192, tpm) == ({"max_output_tokens": 900}, "limit")
    assert output_within_limit(CHAT, {}, 100, 1000, tpm) == ({}, "")  # the context left fits
    # asked for more than the whole limit can ever hold: lowered to what it leaves (Claude Code cannot set its own)
    assert output_within_limit(CHAT, {"max_tokens": 5000}, 100, 8192, tpm) == ({"max_tokens": 900}, "limit")
    assert output_within_limit(CHAT, {"max_tokens": 500}, 100, 8192, tpm) == ({}, "")  # within it: as asked
    assert output_within_limit(CHAT, {"max_tokens": "lots"}, 100, 8192, tpm) == ({}, "")  # the engine says why
    assert output_within_limit(CHAT, {}, 1000, 8192, tpm) == ({}, "")  # the prompt alone is the limit: refused
    assert output_within_limit(CHAT, {}, 100, 8192, Quota(daily_usd=None)) == ({}, "")  # no limit
    assert output_within_limit("/v1/embeddings", {}, 100, 8192, tpm) == ({}, "")


def test_a_request_asking_no_output_limit_gets_what_the_keys_smallest_budget_pays_for() -> None:
    """$0.05 at $0.0001 a token pays for 500 tokens; at "input,output" prices the prompt costs the first."""
    day, both = Quota(daily_usd=Decimal("0.05")), Quota(daily_usd=Decimal("0.05"), owner_monthly_usd=Decimal("0.03"))
    assert output_within_limit(CHAT, {}, 100, 8192, day, "0.0001") == ({"max_completion_tokens": 400}, "budget")
    # 300 tokens at $0.0001 is 0.030000000000000002 in doubles, which admission rounds up past $0.03: 299 fit
    assert output_within_limit(CHAT, {}, 100, 8192, both, "0.0001") == ({"max_completion_tokens": 199}, "budget")
    # the prompt at $0.00005 leaves $0.045: 450 tokens in decimals, the 450th over it in doubles
    assert output_within_limit(CHAT, {}, 100, 8192, day, "0.00005,0.0001") == ({"max_completion_tokens": 449}, "budget")
    assert output_within_limit(CHAT, {"n": 2}, 100, 8192, day, "0.0001") == ({"max_completion_tokens": 200}, "budget")
    assert output_within_limit(CHAT, {}, 100, 8192, day, "0.0000001") == ({}, "")  # the context left costs less
    assert output_within_limit(CHAT, {}, 100, 8192, day, "") == ({}, "")  # no price: the budget is not judged
    assert output_within_limit(CHAT, {}, 500, 8192, day, "0.0001") == ({}, "")  # the prompt alone spends it
    assert output_within_limit(CHAT, {"max_tokens": 9000}, 100, 8192, day, "0.0001") == ({"max_tokens": 400}, "budget")
    tokens_and_budget = Quota(tokens_per_minute=300, daily_usd=Decimal("0.05"))
    assert output_within_limit(CHAT, {}, 100, 8192, tokens_and_budget, "0.0001") == (
        {"max_completion_tokens": 200},
        "limit",
    )
    # what admission would reserve for it fits the budget exactly: rounding up never makes it $0.0000001 over
    for price in ("0.000123", "0.0000037,0.0000111", "0.3"):
        fields, _ = output_within_limit(CHAT, {}, 7, 8192, day, price)
        if fields:
            assert _reserved_nano(price, 7 + fields["max_completion_tokens"], 7) <= 50_000_000
            assert _reserved_nano(price, 8 + fields["max_completion_tokens"], 7) > 50_000_000


def test_a_request_asking_no_output_limit_gets_what_is_left_now_and_one_asking_gets_what_the_whole_leaves() -> None:
    """llm, aider and Codex send no max_tokens: reserving the whole limit refused all but one request a minute."""
    tpm = Quota(tokens_per_minute=25_000, daily_usd=Decimal("0.30"))
    used = Used(tokens_per_minute=24_000, budgets=(255_000_000, 0, 0, 0))  # $0.255 spent of the day's $0.30
    assert output_within_limit(CHAT, {}, 100, 40_960, tpm, "", used) == ({"max_completion_tokens": 900}, "limit")
    assert output_within_limit(CHAT, {}, 100, 40_960, tpm, "0.00001", used) == (
        {"max_completion_tokens": 900},  # $0.045 left pays for 4,400 tokens: the minute's 1,000 are fewer
        "limit",
    )
    assert output_within_limit(CHAT, {}, 100, 40_960, tpm, "0.0001", used) == ({"max_completion_tokens": 349}, "budget")
    # asked (no counters read): lowered only to what the whole leaves (it passes in a later window), never to what
    # this one has left
    assert output_within_limit(CHAT, {"max_tokens": 8000}, 100, 40_960, tpm, "") == ({}, "")
    # a key's cap set 8,000 where the client asked none: what is left now (a trial's budget never applied past a cap)
    assert output_within_limit(CHAT, {"max_tokens": 8000}, 100, 40_960, tpm, "", used) == ({"max_tokens": 900}, "limit")
    full = Used(tokens_per_minute=25_000)
    # nothing left: 1, so admission answers a 429 saying when the window renews, not a 400 for the whole context
    assert output_within_limit(CHAT, {}, 100, 40_960, tpm, "", full) == ({"max_completion_tokens": 1}, "limit")
    spent = Used(budgets=(299_990_000, 0, 0, 0))  # a cent's hundredth left of $0.30: the prompt alone costs more
    assert output_within_limit(CHAT, {}, 100, 40_960, tpm, "0.0001", spent) == ({"max_completion_tokens": 1}, "budget")


@pytest.mark.parametrize(
    ("path", "field", "surface"),
    [
        ("/v1/messages", "max_tokens", Surface.ANTHROPIC),
        (CHAT, "max_completion_tokens", Surface.OPENAI),
        ("/v1/responses", "max_output_tokens", Surface.OPENAI),
    ],
)
def test_an_output_limit_over_the_whole_context_is_refused_in_the_clients_own_field(
    path: str, field: str, surface: Surface
) -> None:
    """A trial's /v1/messages with a huge max_tokens was refused in vLLM's words, naming max_completion_tokens."""
    request = {"model": "m", field: 100_000, "messages": [{"role": "user", "content": "Hi"}]}
    target = Route("m", (Upstream(0, "http://127.0.0.1:9", "k"),), 8192, 0, fit_max_tokens=False)
    key = KeyEntry(1, "hk-x", "", frozenset(), None, None)

    async def plan() -> None:
        gateway = Gateway()
        try:
            body = json.dumps(request).encode()
            await gateway.planner.plan(path, body, request, key, target, surface, StreamKind.CHAT, time.monotonic())
        finally:
            gateway.engines.close()

    with pytest.raises(GatewayError) as no:
        asyncio.run(plan())
    assert no.value.status == 400 and no.value.param == field
    assert no.value.message.startswith(f"{field} is 100,000, more than this model's whole context of 8,192 tokens")


def test_dollars_are_written_to_the_cent_where_whole_cents_else_to_four_digits() -> None:
    """A trial read "$0.3" in a refusal where the console said its budget was $0.30."""
    assert [usd_text(n) for n in (300_000_000, 0, 44_830_000, 1_234_560_000_000, 83_920_000)] == [
        "$0.30",
        "$0.00",
        "$0.04483",
        "$1,234.56",
        "$0.08392",
    ]


def test_the_prompt_is_counted_with_the_fields_that_change_how_the_engine_renders_it() -> None:
    """A reasoning model's ``chat_template_kwargs`` (and the other template fields vLLM's /tokenize takes) render
    other tokens: counted without them, a fitted limit could overrun the context by their difference."""
    messages = [{"role": "user", "content": "hi"}]
    chat = {"model": "m", "messages": messages, "max_tokens": 9, "chat_template_kwargs": {"enable_thinking": False}}
    chat |= {"add_generation_prompt": False, "continue_final_message": True, "temperature": 0.2}
    assert tokenize_request("/v1/chat/completions", chat) == {
        "model": "m",
        "messages": messages,
        "add_generation_prompt": False,
        "continue_final_message": True,
        "chat_template_kwargs": {"enable_thinking": False},
    }
