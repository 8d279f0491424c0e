"""Issue 33's small things on the console side: the request log shows each request's ids (the gateway's and the
client's x-request-id) and its cost with its unit ("—" where no price applied, never $0), finds a request by either
id, and exports the same as CSV; the client's id column (observability 0012) keeps every row; a 500 names the id
it logged the exception under."""

import csv
import io
import logging
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.apps.registry import Apps
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path
from django.utils import timezone
from django.utils.html import escape

import console.urls
from console.access import policy
from console.access.keys import create_key
from console.access.models import Member
from console.observability.models import RequestLog
from console.observability.request_log import CSV_COLUMNS, NO_PRICE, cost_text
from tests.migrating import migrate, schema_at

OURS, THEIRS = "a" * 32, "trace-42/retry 1"
FIELDS = {"model": "m", "surface": "openai", "endpoint": "/v1/chat/completions", "status": 200}


def raises(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug in a view")


# this module is also a URLconf (pytest.mark.urls): the console's URLs and one view that fails
urlpatterns = [path("fails/", raises, name="fails"), *console.urls.urlpatterns]
handler500 = console.urls.handler500


@pytest.fixture
def rows(admin_user: object) -> tuple[RequestLog, RequestLog]:
    key, _ = create_key("ids", admin_user)
    at = timezone.now()
    priced = RequestLog.objects.create(
        api_key=key,
        created_at=at,
        duration_seconds=1.0,
        request_id=OURS,
        client_request_id=THEIRS,
        cost_usd=Decimal("0.000067"),
        prompt_tokens=90,
        completion_tokens=10,
        **FIELDS,
    )
    unpriced = RequestLog.objects.create(
        api_key=key, created_at=at, duration_seconds=0.5, request_id="b" * 32, cost_usd=None, **FIELDS
    )
    return priced, unpriced


@pytest.mark.parametrize(
    ("cost", "text"),
    [
        (None, NO_PRICE),
        (Decimal("0"), "$0.00"),
        (Decimal("0.000067"), "$0.000067"),
        (Decimal("0.000000004"), "$0.000000004"),
        (Decimal("0.0123"), "$0.0123"),
        (Decimal("1234.5"), "$1,234.50"),
    ],
)
def test_a_requests_cost_reads_with_its_unit_and_small_amounts_keep_their_digits(
    cost: Decimal | None, text: str
) -> None:
    assert cost_text(cost) == text


@pytest.mark.django_db
def test_the_request_log_shows_both_ids_and_each_cost_or_a_dash_where_no_price_applied(
    admin: Client, rows: tuple[RequestLog, RequestLog]
) -> None:
    page = admin.get("/requests/").content.decode()
    assert f'data-field="request-id">{OURS}<' in page and f'data-field="request-id">{"b" * 32}<' in page
    assert f'data-field="client-request-id">{THEIRS}<' in page
    assert "$0.000067" in page and f">{NO_PRICE}</span>" in page and "$0.00<" not in page
    assert page.count('title="Not streamed: the whole answer came at once (its Duration)">—<') == 2  # no TTFT
    assert "no data" not in page
    assert "Cost (USD)" in page


@pytest.mark.django_db
@pytest.mark.parametrize("wanted", [OURS, THEIRS])
def test_the_request_log_finds_a_request_by_the_gateways_id_or_the_clients(
    admin: Client, rows: tuple[RequestLog, RequestLog], wanted: str
) -> None:
    page = admin.get("/requests/", {"request_id": wanted}).content.decode()
    assert "(1 request)" in page and OURS in page and "b" * 32 not in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "why"),
    [
        ({"hours": "-5"}, "Last hours: Ensure this value is greater than or equal to 1."),
        ({"hours": "744"}, "Last hours: Ensure this value is less than or equal to 720."),  # a 31-day month
        ({"hours": "10000"}, "Last hours: Ensure this value is less than or equal to 720."),
        ({"hours": "abc"}, "Last hours: Enter a whole number."),
        ({"status": "abc"}, "Status: Enter a whole number."),
        ({"hours": "24", "status": "99"}, "Status: Ensure this value is greater than or equal to 100."),
        (  # a trial's: every row exported, as if unfiltered
            {"batch_id": "batch_7c27"},
            "No filter is named batch_id; the filters are model, key, status, request_id, outcome, priority, batch, "
            "hours.",
        ),
    ],
)
def test_a_filter_that_is_not_valid_lists_nothing_and_says_why(
    admin: Client, rows: tuple[RequestLog, RequestLog], query: dict[str, str], why: str
) -> None:
    """A trial's ``?hours=-5`` showed its error above every row of the day, as if unfiltered; its CSV export answered
    the header alone, so a script exporting got nothing without being told."""
    page = admin.get("/requests/", query).content.decode()
    assert "(0 requests)" in page and "No requests listed: a filter above is not valid." in page
    assert 'class="errorlist' in page
    exported = admin.get("/requests/export.csv", query)
    assert exported.status_code == 400 and exported["Content-Type"].startswith("text/plain")
    assert exported.content.decode() == why


@pytest.mark.django_db
def test_the_csv_export_has_the_ids_and_cost_in_usd_empty_where_no_price_applied(
    admin: Client, rows: tuple[RequestLog, RequestLog]
) -> None:
    resp = admin.get("/requests/export.csv")
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/csv")
    assert resp["Content-Disposition"].startswith('attachment; filename="requests-')
    table = list(csv.DictReader(io.StringIO(b"".join(resp.streaming_content).decode())))  # type: ignore[arg-type]
    assert tuple(table[0]) == CSV_COLUMNS
    by_id = {r["request_id"]: r for r in table}
    assert by_id[OURS]["client_request_id"] == THEIRS and by_id[OURS]["cost_usd"] == "0.000067"
    assert by_id["b" * 32]["client_request_id"] == "" and by_id["b" * 32]["cost_usd"] == ""
    picked = admin.get("/requests/export.csv", {"request_id": THEIRS})
    assert [r["request_id"] for r in csv.DictReader(io.StringIO(b"".join(picked.streaming_content).decode()))] == [OURS]


@pytest.mark.django_db
def test_a_limit_the_gateway_fitted_to_the_context_shows_on_the_page_and_in_the_csv(
    admin: Client, rows: tuple[RequestLog, RequestLog]
) -> None:
    RequestLog.objects.filter(request_id=OURS).update(max_tokens_fitted=1200)
    page = admin.get("/requests/").content.decode()
    assert page.count('data-field="max-tokens-fitted"') == 1 and "max_tokens fitted to 1,200 tokens" in page
    table = csv.DictReader(io.StringIO(b"".join(admin.get("/requests/export.csv").streaming_content).decode()))  # type: ignore[attr-defined]
    assert {r["request_id"]: r["max_tokens_fitted"] for r in table} == {OURS: "1200", "b" * 32: ""}


@pytest.mark.django_db
def test_tool_calls_not_parsed_and_reasoning_tokens_show_on_the_page_and_in_the_csv(
    admin: Client, rows: tuple[RequestLog, RequestLog]
) -> None:
    """A trial's rows with tool_call_failures=1 read only "success tool_calls"; docs/agents.md says the log keeps
    them."""
    RequestLog.objects.filter(request_id=OURS).update(tool_call_failures=1, reasoning_tokens=1234)
    page = admin.get("/requests/").content.decode()
    assert page.count('data-field="tool-call-failures"') == 1 and ">1 tool call not parsed<" in page
    assert page.count('data-field="reasoning-tokens"') == 1 and ">1,234 reasoning tokens<" in page
    table = csv.DictReader(io.StringIO(b"".join(admin.get("/requests/export.csv").streaming_content).decode()))  # type: ignore[attr-defined]
    assert {r["request_id"]: (r["tool_call_failures"], r["reasoning_tokens"]) for r in table} == {
        OURS: ("1", "1234"),
        "b" * 32: ("0", ""),  # none failed; no reasoning seen
    }


@pytest.mark.django_db
def test_a_request_held_for_its_engines_wake_says_how_long_on_the_page_and_in_the_csv(
    admin: Client, rows: tuple[RequestLog, RequestLog]
) -> None:
    RequestLog.objects.filter(request_id=OURS).update(woke_engine=True, wake_seconds=0.9, duration_seconds=65.86557259)
    page = admin.get("/requests/").content.decode()
    assert page.count('data-field="woke"') == 1 and "held 900 ms for its engine's wake" in page
    # one refused while held (no room an admin's action would not be needed for): no wake came for it
    RequestLog.objects.filter(request_id="b" * 32).update(woke_engine=True, wake_seconds=0.619, status=503)
    assert "held 619 ms for a wake that did not come" in admin.get("/requests/").content.decode()
    table = csv.DictReader(io.StringIO(b"".join(admin.get("/requests/export.csv").streaming_content).decode()))  # type: ignore[attr-defined]
    assert {r["request_id"]: (r["wake_seconds"], r["duration_seconds"]) for r in table} == {
        OURS: ("0.9", "65.866"),  # to the millisecond (a fresh user's trial found the float's 17 digits)
        "b" * 32: ("0.619", "0.5"),
    }


@pytest.mark.django_db
def test_a_client_id_a_spreadsheet_would_run_is_exported_as_text(admin: Client, admin_user: object) -> None:
    RequestLog.objects.create(
        created_at=timezone.now(), duration_seconds=1.0, request_id="c" * 32, client_request_id="=1+2", **FIELDS
    )
    text = b"".join(admin.get("/requests/export.csv").streaming_content).decode()  # type: ignore[attr-defined]
    assert ",'=1+2," in text


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_a_500_names_the_id_it_logged_the_exception_under(
    admin_user: object, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(policy.PAGES, "fails", (policy.ALL, policy.NOBODY))
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="console.error_pages"):
        resp = client.get("/fails/")
    error_id = resp["x-request-id"]
    assert resp.status_code == 500 and len(error_id) == 32
    assert f'data-field="error-id">{error_id}<' in resp.content.decode()
    [logged] = [r for r in caplog.records if r.name == "console.error_pages"]
    assert error_id in logged.getMessage() and logged.exc_info and "a bug in a view" in str(logged.exc_info[1])


BEFORE = [("observability", "0011_request_log_wake")]
AFTER = [("observability", "0012_request_log_client_request_id")]


@pytest.fixture
def before() -> Iterator[Apps]:
    with schema_at(BEFORE) as apps:
        yield apps


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_the_client_id_column_are_kept_and_kept_again_going_back(before: Apps) -> None:
    log = before.get_model("observability", "RequestLog")
    log.objects.create(created_at=timezone.now(), duration_seconds=1.5, request_id=OURS, **FIELDS)
    after = migrate(AFTER)
    [row] = after.get_model("observability", "RequestLog").objects.all()
    assert (row.request_id, row.duration_seconds, row.client_request_id) == (OURS, 1.5, None)
    row.client_request_id = THEIRS
    row.save()
    [back] = migrate(BEFORE).get_model("observability", "RequestLog").objects.all()
    assert (back.request_id, back.duration_seconds) == (OURS, 1.5)


@pytest.mark.django_db
def test_a_members_csv_holds_only_their_own_keys_requests(
    rows: tuple[RequestLog, RequestLog], django_user_model: type
) -> None:
    bob = django_user_model.objects.create_user("bob", "", "bob-password-1")  # type: ignore[attr-defined]
    Member.objects.create(user=bob, role="member")
    key, _ = create_key("bob's", bob)
    RequestLog.objects.create(
        api_key=key, created_at=timezone.now(), duration_seconds=1.0, request_id="d" * 32, **FIELDS
    )
    member = Client()
    member.force_login(bob)
    text = b"".join(member.get("/requests/export.csv").streaming_content).decode()  # type: ignore[attr-defined]
    assert [r["request_id"] for r in csv.DictReader(io.StringIO(text))] == ["d" * 32]


@pytest.mark.django_db
def test_the_request_log_shows_each_requests_class_and_batch_and_picks_by_them(
    admin: Client, rows: tuple[RequestLog, RequestLog]
) -> None:
    """A Batch API line's row says its class and links its batch's lines; the filters and the CSV pick by both."""
    priced, _ = rows
    RequestLog.objects.filter(pk=priced.pk).update(priority="batch", batch_id="batch_abc")
    page = admin.get("/requests/").content.decode()
    assert 'data-field="priority">batch · <a href="?batch=batch_abc">batch_abc</a>' in page
    assert 'data-field="priority">standard</small>' in page
    one = admin.get("/requests/", {"batch": "batch_abc"}).content.decode()
    assert "(1 request)" in one and OURS in one
    assert "(1 request)" in admin.get("/requests/", {"priority": "standard"}).content.decode()
    resp = admin.get("/requests/export.csv", {"priority": "batch"})
    table = list(csv.DictReader(io.StringIO(b"".join(resp.streaming_content).decode())))  # type: ignore[arg-type]
    assert [(r["request_id"], r["priority"], r["batch_id"]) for r in table] == [(OURS, "batch", "batch_abc")]


@pytest.mark.django_db
def test_a_failed_request_shows_why_on_the_page_and_in_the_csv(
    admin: Client, rows: tuple[RequestLog, RequestLog]
) -> None:
    why = "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens " + "x" * 100
    _, failed = rows
    RequestLog.objects.filter(pk=failed.pk).update(status=400, error=why)
    page = admin.get("/requests/").content.decode()
    shown = f'title="{escape(why)}" data-field="error">{escape(why[:139])}…</small>'
    assert shown in page and page.count('data-field="error"') == 1  # the whole message in its title
    resp = admin.get("/requests/export.csv")
    table = {r["request_id"]: r for r in csv.DictReader(io.StringIO(b"".join(resp.streaming_content).decode()))}  # type: ignore[arg-type]
    assert (table["b" * 32]["error"], table[OURS]["error"]) == (why, "")


@pytest.mark.django_db
def test_the_csv_leaves_a_cell_empty_where_the_page_says_no_value_and_keeps_zeros(
    admin: Client, rows: tuple[RequestLog, RequestLog]
) -> None:
    """A stream whose client left before any answer byte has no status: "—" on the page, and the CSV said 0."""
    priced, unpriced = rows
    RequestLog.objects.filter(pk=unpriced.pk).update(status=0, client_cancelled=True, stream=True)
    RequestLog.objects.filter(pk=priced.pk).update(completion_tokens=0, cached_tokens=0, cost_usd=Decimal(0))
    text = b"".join(admin.get("/requests/export.csv").streaming_content).decode()  # type: ignore[attr-defined]
    table = {r["request_id"]: r for r in csv.DictReader(io.StringIO(text))}
    columns = ("status", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd")
    assert [table["b" * 32][c] for c in columns] == ["", "", "", "", ""]  # none known
    assert [table[OURS][c] for c in columns] == ["200", "90", "0", "0", "0"]  # known to be zero


@pytest.mark.django_db
def test_the_key_filter_picks_one_key_by_its_whole_name_or_the_start_of_its_prefix(
    admin: Client, admin_user: object
) -> None:
    """A trial's ``?key=g`` exported key g's rows and every row of bob-budget's (a g in its name)."""
    keys = {name: create_key(name, admin_user)[0] for name in ("g", "bob-budget")}
    for n, key in enumerate(keys.values()):
        RequestLog.objects.create(
            api_key=key, created_at=timezone.now(), duration_seconds=1.0, request_id=str(n) * 32, **FIELDS
        )
    g_prefix = keys["g"].prefix
    for wanted in ("g", "G", g_prefix, g_prefix[:7]):
        page = admin.get("/requests/", {"key": wanted}).content.decode()
        assert "(1 request)" in page and "0" * 32 in page, wanted
        text = b"".join(admin.get("/requests/export.csv", {"key": wanted}).streaming_content).decode()  # type: ignore[attr-defined]
        assert [r["key_name"] for r in csv.DictReader(io.StringIO(text))] == ["g"], wanted
    assert "(0 requests)" in admin.get("/requests/", {"key": "budget"}).content.decode()
    assert "its whole name (any case), or its prefix or the start of it" in admin.get("/requests/").content.decode()


@pytest.mark.django_db
def test_a_keys_page_links_to_its_rows_in_the_request_log(
    admin: Client, admin_user: object, rows: tuple[RequestLog, RequestLog]
) -> None:
    """A key's page counted its requests today and this month with no way to them (observability adds the link:
    console.access.page_parts)."""
    key = rows[0].api_key
    other, _ = create_key("other", admin_user)
    RequestLog.objects.create(api_key=other, created_at=timezone.now(), duration_seconds=1.0, **FIELDS)
    page = admin.get(f"/keys/{key.pk}/").content.decode()
    href = f"/requests/?key={key.prefix}&amp;hours=720"
    assert f'<a href="{href}" data-field="key-requests">Its requests in the log (last 30 days)</a>' in page
    listed = admin.get(href.replace("&amp;", "&")).content.decode()
    assert "(2 requests)" in listed and OURS in listed
