"""Live means live (issue 33): the panels count the requests the gateway relays now, from the notes its processes
keep in Redis (gateway.ledger), beside those that ended in the window; a TTFT counts from the first byte; refusals
(4xx) are shown apart from the service's errors, so a client's 400 never reads as an outage."""

import json
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings
from django.test import Client, override_settings

from console.deployments.models import Deployment
from console.observability.in_flight import InFlight, in_flight, itl_so_far, tally
from console.observability.models import RequestLog
from console.observability.request_spool import alive_key, notes_key, processes_key
from console.observability.request_stats import window_stats
from tests.test_panels import deployment, log_row

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_instance() -> Iterator[redis.Redis]:
    """Redis key names of an instance of this test's own: no other test's gateway notes are read."""
    with override_settings(HEARTH_INSTANCE=f"in-flight-{secrets.token_hex(4)}"):
        yield redis.Redis.from_url(settings.REDIS_URL)


def note(dep: Deployment, started_ago: float, ttft: float | None = None, chunks: int = 0) -> str:
    """A note as gateway.ledger writes it: its fixed fields at the start, its progress (TTFT, token events, the
    time of the rewrite) once the request has sent something."""
    now = time.time()
    fields = {"key_id": 1, "prefix": "hk-x", "owner_id": None, "deployment_id": dep.pk, "model": dep.name}
    fields |= {"surface": "openai", "endpoint": "/v1/chat/completions", "stream": True, "started": now - started_ago}
    if ttft is not None:
        fields |= {"chunks": chunks, "status": 200, "ttft": ttft, "updated": now}
    return json.dumps(fields)


def gateway_process(r: redis.Redis, name: str, notes: list[str], alive: bool = True) -> None:
    """A gateway process ``name`` noting ``notes``; ``alive`` False: its alive key has lapsed (it is gone)."""
    r.sadd(processes_key(), name)
    r.hset(notes_key(name), mapping={f"req-{name}-{n}": v for n, v in enumerate(notes)})
    if alive:
        r.set(alive_key(name), "1", ex=60)


def test_running_requests_are_read_from_living_gateway_processes_notes(own_instance: redis.Redis) -> None:
    dep, other = deployment("llama"), deployment("other")
    gateway_process(own_instance, "a", [note(dep, 30.0, ttft=0.4, chunks=11), note(dep, 1.0), note(other, 5.0)])
    gateway_process(own_instance, "b", [note(dep, 12.0, ttft=2.0, chunks=1)])
    gateway_process(own_instance, "gone", [note(dep, 50.0, ttft=0.1, chunks=50)], alive=False)  # the reaper's
    found = in_flight([dep.pk, other.pk])
    assert found is not None
    mine = found[dep.pk]
    assert mine.running == 3 and sorted(mine.ttft) == [0.4, 2.0]  # one has sent no token yet: no TTFT
    assert mine.itl == [pytest.approx((30.0 - 0.4) / 10, abs=0.01)]  # a single token event has no ITL yet
    assert found[other.pk].running == 1 and found[other.pk].ttft == []


def test_a_note_that_is_not_json_or_of_another_deployment_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    found = tally([b"{not json", json.dumps({"deployment_id": 7, "started": 1.0}), json.dumps([1])], [8])
    assert found == {8: InFlight()} and "not JSON" in caplog.text
    assert itl_so_far({"ttft": 0.5, "chunks": 3, "started": 100.0, "updated": 104.5}) == 2.0
    assert itl_so_far({"ttft": 0.5, "chunks": "3", "started": 100.0, "updated": 104.5}) is None


def test_running_is_unknown_not_zero_when_redis_does_not_answer() -> None:
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):  # nothing listens on port 1
        assert in_flight([1]) is None
    dep = deployment()
    stats = window_stats([dep], datetime.now(UTC) - timedelta(minutes=5), False, None)[dep.pk]
    assert stats.running is None


def test_latencies_count_running_requests_from_their_first_byte_alike_in_python_and_postgresql() -> None:
    dep = deployment()
    for ttft in (0.05, 0.2, 0.4):
        log_row("llama", ttft=ttft)  # ITL (0.55 - ttft) / 10
    log_row("llama", status=500, ttft=None, completion_tokens=0)  # an engine's error: no speed
    RequestLog.objects.filter(ttft_seconds=0.4).update(woke_engine=True, wake_seconds=0.3)  # its TTFT holds a wake
    flights = {dep.pk: InFlight(running=4, ttft=[1.0, 2.0], itl=[0.3])}
    since = datetime.now(UTC) - timedelta(minutes=5)
    for in_database in (True, False):  # PostgreSQL's aggregates, and the rows counted in Python
        stats = window_stats([dep], since, in_database, flights)[dep.pk]
        assert stats.running == 4 and stats.running_ttft == 2 and stats.total == 4 and stats.held_for_wake == 1
        assert stats.ttft_count == 5 and stats.ttft_q["p50"] == pytest.approx(0.4)
        assert stats.ttft_q["p99"] == pytest.approx(1.0 + 0.96 * 1.0)  # numpy's linear rule over 5 values
        assert stats.itl_count == 4 and stats.itl_q["p50"] == pytest.approx((0.035 + 0.05) / 2)
    only_running = window_stats([deployment("quiet")], since, False, {})
    assert next(iter(only_running.values())).running == 0


def test_a_clients_400_is_a_refusal_never_an_outage_and_left_out_of_the_error_rate(admin: Client) -> None:
    dep = deployment()
    log_row("llama", status=400, ttft=None, completion_tokens=None, finish_reason="")
    stats = window_stats([dep], datetime.now(UTC) - timedelta(minutes=5), False, {})[dep.pk]
    assert (stats.error_rate, stats.refusal_rate, stats.errors_by_status) == (None, 1.0, {400: 1})
    dashboard = admin.get("/").content.decode()
    assert "100.0 %" not in dashboard and "1 refused (4xx)" in dashboard and "0 running" in dashboard
    assert ">none answered<" in dashboard  # no request the service could fail: no rate, not 0.0 %
    panel = admin.get(f"/deployments/{dep.pk}/panel/").content.decode()
    assert 'data-field="error_rate"><span class="nodata">none answered<' in panel
    assert 'data-field="refusal_rate">100.0 %' in panel
    # the count links to those rows in the request log (a trial found no way from the numbers to the requests)
    href = "/requests/?model=llama&amp;outcome=refused&amp;hours=1"
    assert f'data-field="outcome_refused"><a href="{href}"' in panel and 'data-field="outcome_success">0<' in panel
    assert "(1 request)" in admin.get(href.replace("&amp;", "&")).content.decode()
    api = admin.get(f"/api/deployments/{dep.pk}/metrics").json()
    assert (api["error_rate"], api["refusal_rate"], api["running"]) == (None, 1.0, 0)

    for _ in range(3):  # a crash among refusals reads at its rate among the requests answered: 1 of 2, not 1 of 5
        log_row("llama", status=400, ttft=None, completion_tokens=None, finish_reason="")
    log_row("llama")
    log_row("llama", status=500, ttft=None, completion_tokens=0)
    stats = window_stats([dep], datetime.now(UTC) - timedelta(minutes=5), False, {})[dep.pk]
    assert (stats.error_rate, stats.refusal_rate) == (0.5, pytest.approx(4 / 6))
    assert 'data-field="error_rate">50.0 % <small class="muted">of 2</small>' in admin.get("/").content.decode()


def test_the_pages_show_running_requests_and_their_ttft_before_any_ends(
    own_instance: redis.Redis, admin: Client
) -> None:
    dep = deployment()
    gateway_process(own_instance, "a", [note(dep, 20.0, ttft=0.5, chunks=40), note(dep, 20.0, ttft=0.7, chunks=40)])
    dashboard = admin.get("/").content.decode()
    assert "2 running" in dashboard and "0 finished" in dashboard and "no requests" not in dashboard
    panel = admin.get(f"/deployments/{dep.pk}/panel/").content.decode()
    assert 'data-field="gateway_running">2 running' in panel and "(2 still running)" in panel
    assert 'data-field="user_ttft_p50">600 ms' in panel


def test_the_dashboard_says_none_streamed_after_only_whole_answers_never_no_requests(admin: Client) -> None:
    deployment()
    for _ in range(3):
        log_row("llama", ttft=None, stream=False)
    row = admin.get("/").content.decode().split('data-field="user_ttft_q">')[1].split("</td>")[0]
    assert "none streamed" in row and "3 finished" in row
    assert "no requests" not in row and "no first token yet" not in row


def test_the_dashboard_says_how_many_served_requests_were_held_for_a_wake_beside_their_ttft(admin: Client) -> None:
    """A trial's dashboard read "TTFT p50 / p99 211 s / 211 s" after a relaunch, with no hint that the wait was the
    engine's launch, not a slow engine."""
    deployment()
    log_row("llama", ttft=211.0, woke_engine=True, wake_seconds=210.5)
    log_row("llama", ttft=0.2)
    html = admin.get("/").content.decode()
    assert '>2 finished</span> · <span data-field="held_for_wake"' in html and ">1 held for a wake</span>" in html
