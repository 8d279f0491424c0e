"""The gateway's batch writer of RequestLog rows."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from console.observability.models import RequestLog
from console.observability.request_rows import write_rows
from gateway.accounting import COLUMNS, Outcome, row_of, write


def test_the_batch_writer_fills_every_column() -> None:
    assert set(COLUMNS) == {f.column for f in RequestLog._meta.concrete_fields if not f.primary_key}


@pytest.mark.django_db
def test_a_batch_becomes_rows_with_the_outcomes_values() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 2}}
    done = Outcome(
        None,
        "hk-abcdefgh",
        "m",
        "openai",
        "/v1/chat/completions",
        True,
        200,
        "length",
        usage,
        0.05,
        1.5,
        ended_at=1_700_000_000.25,
        cost_usd=Decimal("0.000005810"),
    )
    cut = Outcome(
        None,
        "hk-abcdefgh",
        "m",
        "anthropic",
        "/v1/messages",
        True,
        200,
        None,
        {"input_tokens": 7},
        None,
        0.5,
        truncated=True,
        client_cancelled=True,
        ended_at=1_700_000_001.0,
    )
    write([done, cut])
    first, second = RequestLog.objects.order_by("created_at")
    assert first.created_at == datetime.fromtimestamp(1_700_000_000.25, UTC)
    assert (first.surface, first.endpoint, first.stream, first.status, first.finish_reason) == (
        "openai",
        "/v1/chat/completions",
        True,
        200,
        "length",
    )
    assert (first.prompt_tokens, first.completion_tokens, first.cached_tokens) == (3, 4, 2)
    assert (first.ttft_seconds, first.duration_seconds, first.truncated, first.client_cancelled) == (
        0.05,
        1.5,
        False,
        False,
    )
    assert (second.finish_reason, second.prompt_tokens, second.completion_tokens, second.ttft_seconds) == (
        "",
        7,
        None,
        None,
    )
    assert second.truncated and second.client_cancelled and second.api_key_id is None
    assert (first.cost_usd, second.cost_usd) == (Decimal("0.000005810"), None)


@pytest.mark.django_db
def test_an_error_s_message_is_kept_cut_to_its_column_and_a_row_spooled_without_one_is_written() -> None:
    refused = Outcome(None, "hk-abcdefgh", "m", "openai", "/v1/chat/completions", False, 400, error="x" * 600)
    served = row_of(Outcome(None, "hk-abcdefgh", "m", "openai", "/v1/chat/completions", False, 200))
    del served["error"]  # as a gateway from before the column spools it
    assert write([refused]) == 1 and write_rows([served]) == 1
    assert sorted(RequestLog.objects.values_list("status", "error")) == [(200, ""), (400, "x" * 500)]


@pytest.mark.django_db
def test_a_batch_written_again_changes_nothing_and_brings_back_no_row_deleted_since() -> None:
    """PostgreSQL copies a batch through a temporary table of its session (request_rows._copy_in): what one batch
    left there must not come back with the next."""
    rows = [row_of(Outcome(None, "hk-abcdefgh", "m", "openai", "/v1/completions", False, 200)) for _ in range(3)]
    assert write_rows(rows) == 3 and write_rows(rows[:2]) == 2
    assert RequestLog.objects.count() == 3
    RequestLog.objects.filter(request_id=rows[0]["request_id"]).delete()
    later = row_of(Outcome(None, "hk-abcdefgh", "m", "openai", "/v1/completions", False, 429))
    assert write_rows([later]) == 1
    kept = set(RequestLog.objects.values_list("request_id", flat=True))
    assert kept == {rows[1]["request_id"], rows[2]["request_id"], later["request_id"]}
