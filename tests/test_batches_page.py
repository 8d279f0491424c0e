"""The console's Batches page and a batch's own page (console.batches.views): members see their own keys' batches
only (another's batch and its files answer 404), viewers read but neither cancel nor download, cancel from the page
(audited), the output and error files as JSONL downloads, the rate and ETA in words (never "0" before a line
finished), cost from the request log; and the dashboard's queue depth per class from the gateway's lanes' Redis
entries (console.observability.queue_depth)."""

import json
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import Client
from django.utils import timezone

from console.access.keys import create_key
from console.access.models import Member
from console.audit.models import AuditEntry
from console.batches import files
from console.batches.models import Batch, BatchLine, LineState, Purpose, Status
from console.batches.progress import progress
from console.observability.models import RequestLog
from console.observability.queue_depth import depth_key
from tests.test_console_display import a_deployment

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-password-1"
OUTPUT = b'{"id":"r1","custom_id":"a","response":{"status_code":200,"body":{}},"error":null}\n'
ERRORS = b'{"id":"r2","custom_id":"b","response":{"status_code":400,"body":{}},"error":{"code":"bad","message":"no"}}\n'


def a_batch(key: Any, status: str = Status.IN_PROGRESS, total: int = 10, **fields: Any) -> Batch:
    now = timezone.now()
    started = now - timedelta(minutes=2) if status != Status.VALIDATING else None
    values: dict[str, Any] = {"in_progress_at": started, "created_at": now - timedelta(minutes=3)} | fields
    return Batch.objects.create(
        key=key,
        endpoint="/v1/chat/completions",
        input_file_id="file-0",
        status=status,
        total=total,
        expires_at=now + timedelta(hours=24),
        **values,
    )


def answered(batch: Batch, done: int, failed: int, ago: float = 30) -> None:
    """``done`` lines answered 2xx and ``failed`` answered otherwise, ``ago`` seconds back; the counts raised."""
    at = timezone.now() - timedelta(seconds=ago)
    rows = [(LineState.DONE, i) for i in range(done)] + [(LineState.FAILED, done + i) for i in range(failed)]
    BatchLine.objects.bulk_create(
        BatchLine(
            batch=batch,
            index=i,
            custom_id=f"line-{i}",
            url=batch.endpoint,
            body={"model": "m"},
            state=state,
            answered_at=at,
            answer={"custom_id": f"line-{i}", "response": {"status_code": 500}, "error": {"code": "x", "message": "m"}}
            if state == LineState.FAILED
            else {"custom_id": f"line-{i}"},
        )
        for state, i in rows
    )
    Batch.objects.filter(pk=batch.pk).update(completed=done, failed=failed)
    batch.refresh_from_db()


@pytest.fixture
def world(django_user_model: Any) -> dict[str, Any]:
    django_user_model.objects.create_superuser("root", "", PASSWORD)
    mia = django_user_model.objects.create_user("mia", "", PASSWORD)
    Member.objects.create(user=mia, role="member")
    noah = django_user_model.objects.create_user("noah", "", PASSWORD)
    Member.objects.create(user=noah, role="member")
    vic = django_user_model.objects.create_user("vic", "", PASSWORD)
    Member.objects.create(user=vic, role="viewer")
    mine, _ = create_key("mia-laptop", mia)
    theirs, _ = create_key("noah-ci", noah)
    done = a_batch(mine, Status.COMPLETED, total=2, completed=1, failed=1, completed_at=timezone.now())
    done.output_file = files.store(mine.pk, f"{done.public_id}_output.jsonl", Purpose.BATCH_OUTPUT, OUTPUT, 1)
    done.error_file = files.store(mine.pk, f"{done.public_id}_error.jsonl", Purpose.BATCH_OUTPUT, ERRORS, 1)
    done.save()
    other = a_batch(theirs, Status.COMPLETED, total=1, completed=1, completed_at=timezone.now())
    other.output_file = files.store(theirs.pk, f"{other.public_id}_output.jsonl", Purpose.BATCH_OUTPUT, OUTPUT, 1)
    other.save()
    return {"mine": mine, "theirs": theirs, "done": done, "other": other}


def signed_in(client: Client, username: str) -> Client:
    assert client.post("/login/", {"username": username, "password": PASSWORD}).status_code == 302
    return client


def test_a_member_sees_only_their_own_keys_batches_and_an_admin_sees_all(client: Client, world: dict[str, Any]) -> None:
    page = signed_in(client, "mia").get("/batch-jobs/").content.decode()
    assert world["done"].public_id in page and world["other"].public_id not in page
    assert signed_in(Client(), "mia").get("/batch-jobs/table/").content.decode().count("data-batch=") == 1
    page = signed_in(Client(), "root").get("/batch-jobs/").content.decode()
    assert world["done"].public_id in page and world["other"].public_id in page
    assert ">Batches</a>" in page  # in the navigation
    assert signed_in(Client(), "mia").get("/batches", follow=True).redirect_chain[-1][0] == "/batch-jobs/"  # a guess


def test_another_members_batch_its_files_and_its_cancel_answer_404(client: Client, world: dict[str, Any]) -> None:
    other = world["other"].public_id
    signed_in(client, "mia")
    for url in (f"/batch-jobs/{other}/", f"/batch-jobs/{other}/progress/", f"/batch-jobs/{other}/output.jsonl"):
        assert client.get(url).status_code == 404, url
    assert client.post(f"/batch-jobs/{other}/cancel/").status_code == 404
    assert client.get(f"/batch-jobs/{world['done'].public_id}/output.jsonl").status_code == 200  # her own


def test_a_viewer_reads_every_batch_but_neither_downloads_nor_cancels(client: Client, world: dict[str, Any]) -> None:
    running = a_batch(world["theirs"], Status.IN_PROGRESS)
    signed_in(client, "vic")
    page = client.get("/batch-jobs/").content.decode()
    assert world["other"].public_id in page and world["done"].public_id in page
    assert 'data-action="cancel"' not in page and 'data-action="output"' not in page
    assert client.get(f"/batch-jobs/{world['other'].public_id}/output.jsonl").status_code == 403
    assert client.post(f"/batch-jobs/{running.public_id}/cancel/").status_code == 403
    assert Batch.objects.get(pk=running.pk).status == Status.IN_PROGRESS


def test_downloads_are_the_files_content_as_jsonl_under_their_names(client: Client, world: dict[str, Any]) -> None:
    done = world["done"]
    signed_in(client, "mia")
    out = client.get(f"/batch-jobs/{done.public_id}/output.jsonl")
    assert out["Content-Type"] == "application/jsonl"
    assert out["Content-Disposition"] == f'attachment; filename="{done.public_id}_output.jsonl"'
    assert b"".join(out.streaming_content) == OUTPUT  # type: ignore[attr-defined]
    errors = client.get(f"/batch-jobs/{done.public_id}/errors.jsonl")
    assert errors["Content-Disposition"] == f'attachment; filename="{done.public_id}_error.jsonl"'
    assert b"".join(errors.streaming_content) == ERRORS  # type: ignore[attr-defined]
    no_errors = world["other"]
    admin = signed_in(Client(), "root")
    assert admin.get(f"/batch-jobs/{no_errors.public_id}/errors.jsonl").status_code == 404  # it has none
    assert admin.get(f"/batch-jobs/{done.public_id}/output.jsonl").status_code == 200  # an admin downloads anyone's


def test_cancel_from_the_page_stops_a_running_batch_and_is_audited(client: Client, world: dict[str, Any]) -> None:
    running, waiting = a_batch(world["mine"], Status.IN_PROGRESS), a_batch(world["mine"], Status.VALIDATING)
    signed_in(client, "mia")
    page = client.get("/batch-jobs/").content.decode()
    assert page.count('data-action="cancel"') == 2  # not on the completed one
    answer = client.post(f"/batch-jobs/{running.public_id}/cancel/", follow=True)
    assert Batch.objects.get(pk=running.pk).status == Status.CANCELLING  # the runner ends it within seconds
    assert "is stopping" in answer.content.decode()
    client.post(f"/batch-jobs/{waiting.public_id}/cancel/", {"next": "list"})
    assert Batch.objects.get(pk=waiting.pk).status == Status.CANCELLED  # not started: at once
    entries = AuditEntry.objects.filter(action="batch.cancel").order_by("id")
    assert [(e.actor_name, e.target_name, e.changes["status"]) for e in entries] == [
        ("mia", running.public_id, ["in_progress", "cancelling"]),
        ("mia", waiting.public_id, ["validating", "cancelled"]),
    ]
    answer = client.post(f"/batch-jobs/{world['done'].public_id}/cancel/", follow=True)
    assert "only a batch validating or in progress is cancelled" in answer.content.decode()
    assert Batch.objects.get(pk=world["done"].pk).status == Status.COMPLETED


def test_no_estimate_until_a_line_finished_then_an_eta_from_the_measured_rate(
    client: Client, world: dict[str, Any]
) -> None:
    batch = a_batch(world["mine"], Status.IN_PROGRESS, total=100)
    signed_in(client, "mia")
    live = client.get(f"/batch-jobs/{batch.public_id}/progress/").content.decode()
    assert "no estimate yet" in live and "no line finished yet" in live and "lines/min" not in live
    answered(batch, done=8, failed=2)  # 10 lines in the 2 minutes since it started: 5 a minute, 90 left
    live = client.get(f"/batch-jobs/{batch.public_id}/progress/").content.decode()
    assert "about 18 min" in live and "8 done" in live and "2 failed" in live and "100 lines" in live
    assert batch.in_progress_at is not None
    now = batch.in_progress_at + timedelta(minutes=2)
    shown = progress([batch], now)[0]
    assert shown.rate == pytest.approx(5.0) and shown.eta == "about 18 min"
    assert (shown.done_pct, shown.failed_pct) == (8.0, 2.0)


def test_a_stalled_batch_and_an_ended_one_say_so_in_words(world: dict[str, Any]) -> None:
    stalled = a_batch(world["mine"], Status.IN_PROGRESS, total=10, in_progress_at=timezone.now() - timedelta(hours=1))
    answered(stalled, done=3, failed=0, ago=1800)
    ended = world["done"]
    now = timezone.now()
    late, done = progress([stalled, ended], now)
    assert (late.rate, late.eta) == (None, "no estimate: none finished in the last 10 min")
    assert done.eta.startswith("done in ") and done.rate is not None
    quick = a_batch(world["mine"], Status.COMPLETED, total=3, completed=3, in_progress_at=now, completed_at=now)
    assert progress([quick], now)[0].rate_words == "too quick to measure"  # not 3 lines in "1 s": 180 a minute
    assert progress([quick], now)[0].eta == "done in under a second"
    took = a_batch(
        world["mine"], Status.COMPLETED, total=3, completed=3, in_progress_at=now - timedelta(seconds=108),
        completed_at=now,
    )  # fmt: skip
    assert progress([took], now)[0].eta == "done in 1 min 48 s"  # a trial read "done in 1 min"
    waiting = progress([a_batch(world["mine"], Status.VALIDATING)], now)[0]
    assert (waiting.rate, waiting.rate_words, waiting.eta) == (None, "not started", "no estimate yet")


def test_a_cancelled_batch_counts_the_lines_it_never_ran(client: Client, world: dict[str, Any]) -> None:
    """A fresh user's trial: "9 done · 0 failed · 40 lines" for a batch cancelled with 31 lines unsent."""
    cut = a_batch(world["mine"], Status.CANCELLED, total=40, cancelled_at=timezone.now())
    answered(cut, done=9, failed=0)
    assert [p.not_run for p in progress([cut, world["done"]], timezone.now())] == [31, 0]
    page = signed_in(client, "mia").get("/batch-jobs/").content.decode()
    assert '9 done</span> · <span>0 failed</span> · <span data-field="not-run">31 not run (cancelled)</span>' in page
    page = client.get(f"/batch-jobs/{cut.public_id}/").content.decode()  # a trial read it as still running
    assert "None: no line it ran failed." in page and "so far" not in page and "Expires" not in page


def test_cost_so_far_is_the_request_logs_charge_of_the_batchs_lines(client: Client, world: dict[str, Any]) -> None:
    batch = a_batch(world["mine"], Status.IN_PROGRESS)
    for cost in ("0.0015", "0.0025", None):
        RequestLog.objects.create(
            created_at=datetime.now(UTC), api_key=world["mine"], model="m", surface="openai", endpoint="chat",
            status=200, duration_seconds=0.1, cost_usd=cost and Decimal(cost), priority="batch",
            batch_id=batch.public_id,
        )  # fmt: skip
    signed_in(client, "mia")
    row = client.get("/batch-jobs/table/").content.decode().split(f'data-batch="{batch.public_id}"')[1]
    assert "$0.0040" in row.split("</tr>")[0] and "2 of 3 logged requests priced" in row.split("</tr>")[0]
    page = client.get(f"/batch-jobs/{world['done'].public_id}/").content.decode()
    assert '<span class="nodata">none</span>' in page and "$0" not in page  # no request logged: not "$0.00"


def test_a_batchs_page_lists_its_times_and_failed_lines(client: Client, world: dict[str, Any]) -> None:
    batch = a_batch(world["mine"], Status.IN_PROGRESS, total=5)
    answered(batch, done=1, failed=2)
    page = signed_in(client, "mia").get(f"/batch-jobs/{batch.public_id}/").content.decode()
    assert "Times <small>(UTC)</small>" in page and "In progress" in page and "Expires" in page
    assert "Completed</th>" not in page  # not yet
    assert page.count("<code>line-") == 2 and 'hx-trigger="every 2s"' in page  # refreshed while it runs
    ended = client.get(f"/batch-jobs/{world['done'].public_id}/progress/").content.decode()
    assert 'id="batch-live"' in ended and "hx-trigger" not in ended  # the last refresh: it polls no more
    assert "<dt>ETA</dt>" in page and "<dt>Cost so far</dt>" in page  # while it runs
    assert "<dt>Run</dt>" in ended and "<dt>Cost</dt>" in ended and "so far" not in ended  # once it ended
    # its input file ("file-0") is gone: said, not shown as if it were there to download (a trial)
    assert '<code>file-0</code> <small class="muted" data-field="input-deleted">deleted since' in page
    kept = files.store(world["mine"].pk, "in.jsonl", Purpose.BATCH, OUTPUT, 1)
    Batch.objects.filter(pk=batch.pk).update(input_file_id=kept.public_id)
    assert "input-deleted" not in client.get(f"/batch-jobs/{batch.public_id}/").content.decode()


def test_a_batchs_page_shows_its_tokens_and_links_its_lines_in_the_request_log(
    client: Client, world: dict[str, Any]
) -> None:
    batch = a_batch(world["mine"], input_tokens=1200, cached_tokens=200, output_tokens=345, completed=3)
    fresh = a_batch(world["mine"])
    for owner, model in ((batch, "in-this-batch"), (world["done"], "in-another-batch")):
        RequestLog.objects.create(
            created_at=datetime.now(UTC), api_key=world["mine"], model=model, surface="openai", endpoint="chat",
            status=200, duration_seconds=0.1, priority="batch", batch_id=owner.public_id,
        )  # fmt: skip
    signed_in(client, "mia")
    page = client.get(f"/batch-jobs/{batch.public_id}/").content.decode()
    assert "1,200 in (200 cached) · 345 out" in page and "reasoning" not in page
    assert f'href="/requests/?batch={batch.public_id}"' in page
    assert (
        '<span class="nodata">none answered yet</span>'
        in client.get(f"/batch-jobs/{fresh.public_id}/").content.decode()
    )
    for asked in (batch.public_id, batch.public_id[:14]):  # whole, or its start as the Batches list shows it
        log = client.get("/requests/", {"batch": asked}).content.decode()
        assert "in-this-batch" in log and "in-another-batch" not in log


def held(deployment_id: int, **counts: int) -> None:
    """A gateway process's entry in the lanes' Redis hash, as gateway.lanes writes it."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.hset(depth_key(deployment_id), "host:1", json.dumps(counts | {"at": time.time()}))
    client.close()


def test_the_dashboard_shows_requests_held_per_class_and_none_held(client: Client, world: dict[str, Any]) -> None:
    busy, quiet = a_deployment("busy"), a_deployment("quiet")
    redis.Redis.from_url(settings.REDIS_URL).delete(depth_key(busy.pk), depth_key(quiet.pk))
    held(busy.pk, interactive=0, standard=3, batch=12)
    live = signed_in(client, "root").get("/dashboard/live/").content.decode()
    rows = {name: live.split(f'data-deployment="{name}"')[1].split("</tr>")[0] for name in ("busy", "quiet")}
    assert "3 standard · 12 batch held" in rows["busy"]
    assert "none held" in rows["quiet"] and "0 standard" not in rows["quiet"]


def test_the_dashboard_says_the_queue_depth_is_unknown_when_redis_does_not_answer(
    client: Client, world: dict[str, Any], settings: Any
) -> None:
    a_deployment("dark")
    signed_in(client, "root")
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    live = client.get("/dashboard/live/").content.decode()
    row = live.split('data-deployment="dark"')[1].split("</tr>")[0]
    assert "held: unknown" in row and "none held" not in row
