"""The usage page and GET /api/usage: requests, prompt, cached and completion tokens, errors and refusals (as the
dashboard counts them) by UTC day and by key, member or model, from the request log; members see their own keys
only; CSV export."""

import csv
import io
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from console.access.keys import create_key
from console.access.models import Member
from console.observability.models import RequestLog
from console.usage.aggregation import Window

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-password-1"
DAY = datetime(2026, 11, 30, 12, tzinfo=UTC)


@pytest.fixture
def logs(django_user_model: Any) -> dict[str, Any]:
    root = django_user_model.objects.create_superuser("root", "", PASSWORD)
    mia = django_user_model.objects.create_user("mia", "", PASSWORD)
    Member.objects.create(user=mia, role="member")
    ops, _ = create_key("ops", root)
    laptop, _ = create_key("laptop", mia)
    rows = [  # key, when, model, status, prompt, cached, completion, truncated, USD charged
        (ops, DAY, "smol", 200, 10, 4, 5, False, "0.0015"),
        (ops, DAY + timedelta(hours=11, minutes=59), "smol", 200, 20, None, 7, False, "0.0027"),
        (ops, DAY, "big", 429, None, None, None, False, None),
        (ops, DAY, "big", 502, None, None, None, False, None),
        (ops, DAY, "big", 499, None, None, None, False, None),  # left before its body was whole: cancelled
        (laptop, DAY, "smol", 200, 1, 0, 2, True, None),
        (laptop, DAY - timedelta(days=1), "smol", 200, 100, 50, 50, False, None),
        (laptop, DAY + timedelta(hours=12), "smol", 200, 1000, 0, 1000, False, None),  # the next UTC day
    ]
    for key, when, model, status, prompt, cached, completion, truncated, cost in rows:
        RequestLog.objects.create(
            created_at=when,
            api_key=key,
            model=model,
            surface="openai",
            endpoint="chat",
            status=status,
            prompt_tokens=prompt,
            cached_tokens=cached,
            completion_tokens=completion,
            truncated=truncated,
            client_cancelled=status == 499,
            duration_seconds=0.1,
            cost_usd=cost,
        )
    return {"ops": ops, "laptop": laptop}


def signed_in(client: Client, username: str) -> Client:
    assert client.post("/login/", {"username": username, "password": PASSWORD}).status_code == 302
    return client


def test_usage_by_key_by_utc_day_counts_tokens_and_errors(client: Client, logs: dict[str, Any]) -> None:
    rows = signed_in(client, "root").get("/api/usage?group=key&since=2026-11-29&until=2026-11-30").json()
    ops, laptop = (f"{k.name} ({k.prefix}…)" for k in (logs["ops"], logs["laptop"]))
    got = [
        (
            r["day"],
            r["group"],
            r["requests"],
            r["prompt_tokens"],
            r["cached_tokens"],
            r["completion_tokens"],
            r["errors"],
            r["refused"],
            r["cost_usd"],
        )
        for r in rows
    ]
    assert got == [
        ("2026-11-30", laptop, 1, 1, 0, 2, 1, 0, None),  # a stream the engine cut short is an error
        ("2026-11-30", ops, 5, 30, 4, 12, 1, 1, 0.0042),  # the 429 is refused, the 502 an error, the 499 neither
        ("2026-11-29", laptop, 1, 100, 50, 50, 0, 0, None),
    ]
    page = client.get("/usage/?group=key&since=2026-11-29&until=2026-11-30").content.decode()
    assert "$0.0042</td>" in page and "no price</span>" in page and "$0.0042</th>" in page  # a row, another, the total
    by_model = client.get("/api/usage?group=model&since=2026-11-30&until=2026-11-30").json()
    assert {r["group"]: r["cached_tokens"] for r in by_model} == {"big": None, "smol": 4}  # big: none reported
    page = client.get("/usage/?group=model&since=2026-11-30&until=2026-11-30").content.decode()
    assert 'data-field="cached_tokens"><span class="muted" title="no engine of these requests reported cached' in page
    csv_rows = client.get("/usage/export.csv?group=model&since=2026-11-30&until=2026-11-30").content.decode()
    assert ",big,standard,3,0,,0,1,1," in csv_rows.replace("\r", ""), csv_rows  # an empty cell, not 0


def test_usage_by_member_and_by_model(client: Client, logs: dict[str, Any]) -> None:
    signed_in(client, "root")
    by_member = client.get("/api/usage?group=member&since=2026-11-30&until=2026-11-30").json()
    assert [(r["group"], r["requests"]) for r in by_member] == [("mia", 1), ("root", 5)]
    by_model = client.get("/api/usage?group=model&since=2026-11-30&until=2026-12-01").json()
    assert [(r["day"], r["group"], r["requests"]) for r in by_model] == [
        ("2026-12-01", "smol", 1),
        ("2026-11-30", "big", 3),
        ("2026-11-30", "smol", 3),
    ]


def test_requests_refused_before_their_model_was_read_are_a_row_that_says_so(
    client: Client, logs: dict[str, Any]
) -> None:
    RequestLog.objects.create(
        created_at=DAY, api_key=logs["ops"], model="", surface="openai", endpoint="chat", status=400,
        duration_seconds=0.01,
    )  # fmt: skip
    rows = signed_in(client, "root").get("/api/usage?group=model&since=2026-11-30&until=2026-11-30").json()
    assert [(r["group"], r["requests"]) for r in rows] == [("(no model)", 1), ("big", 3), ("smol", 3)]


def test_a_member_sees_only_their_own_keys_usage(client: Client, logs: dict[str, Any]) -> None:
    rows = signed_in(client, "mia").get("/api/usage?group=member&since=2026-11-01&until=2026-12-01").json()
    assert {r["group"] for r in rows} == {"mia"}
    page = client.get("/usage/?group=key&since=2026-11-01&until=2026-12-01").content.decode()
    assert "laptop" in page and "ops (" not in page and "Your keys only." in page


def test_the_csv_export_holds_the_pages_rows(client: Client, logs: dict[str, Any]) -> None:
    resp = signed_in(client, "root").get("/usage/export.csv?group=model&since=2026-11-29&until=2026-11-30")
    assert resp["Content-Disposition"] == 'attachment; filename="usage-by-model-2026-11-29-2026-11-30.csv"'
    rows = list(csv.DictReader(io.StringIO(resp.content.decode())))
    got = [
        (r["day"], r["model"], r["requests"], r["completion_tokens"], r["errors"], r["refused"], r["cost_usd"])
        for r in rows
    ]
    assert got == [
        ("2026-11-30", "big", "3", "0", "1", "1", ""),
        ("2026-11-30", "smol", "3", "14", "1", "0", "0.0042"),
        ("2026-11-29", "smol", "1", "50", "0", "0", ""),
    ]


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("since=2026-12-01&until=2026-11-01", "start is after its end"),
        ("since=2024-01-01&until=2026-01-01", "at most 366 days"),
        ("group=team", "Group by one of: key, member, model"),
        ("since=2026-01-01&until=Monday", "Give dates as YYYY-MM-DD."),
        ("until=9999-12-31", "Give dates no later than 9999-12-30."),  # its day's end is no date: a trial's 500
        ("since=9999-12-31&until=9999-12-31", "Give dates no later than 9999-12-30."),
    ],
)
def test_a_bad_window_or_grouping_is_explained(client: Client, logs: dict[str, Any], query: str, error: str) -> None:
    """The same words from the API (its {"detail": ...}), the page (above its form) and the CSV (plain text)."""
    signed_in(client, "root")
    answer = client.get(f"/api/usage?{query}")
    assert answer.status_code == 400 and error in answer.json()["detail"]
    page = client.get(f"/usage/?{query}")
    assert page.status_code == 400 and error in page.content.decode().replace("&#x27;", "'")
    export = client.get(f"/usage/export.csv?{query}")
    assert export.status_code == 400 and error in export.content.decode()


def test_a_window_in_the_calendars_first_days_is_empty_not_an_error(client: Client, logs: dict[str, Any]) -> None:
    """The default start, 29 days before the end, stops at the calendar's first day (0001-01-05 was a 500)."""
    assert Window.parse(until="0001-01-05") == Window(date(1, 1, 1), date(1, 1, 5))
    signed_in(client, "root")
    assert client.get("/api/usage?until=0001-01-05").json() == []
    assert client.get("/api/usage?since=0001-01-01&until=0001-01-01").json() == []
    assert client.get("/usage/export.csv?until=0001-01-05").status_code == 200
    assert "No requests in this window." in client.get("/usage/?until=0001-01-05").content.decode()
