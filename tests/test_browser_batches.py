"""The Batches page and a batch's page in headless Chromium at 1280×800, light and dark: a running batch (its bar,
rate and ETA), one just started (no estimate yet), a completed one with its files and cost, a cancelled one; and the
dashboard's queue depth per class. Screenshots in the test's folder (and HEARTH_SCREENSHOTS, when set)."""

import json
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from console.access.keys import create_key
from console.access.models import Member
from console.batches import files
from console.batches.models import Batch, BatchLine, LineState, Purpose, Status
from console.observability.models import RequestLog
from console.observability.queue_depth import depth_key
from tests.chromium import browser  # noqa: F401 - the module's Chromium
from tests.test_browser_panels import keep
from tests.test_console_display import a_deployment

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def a_batch(key: Any, status: str, total: int, started_ago: float | None, **fields: Any) -> Batch:
    """A batch of another appliance whose runner was just seen: a session's Celery worker (tests.conftest.worker,
    alive from an earlier test on this xdist worker) neither runs nor adopts it (console.batches.tasks), where it
    would finish the running batch that has no lines left to send (CI saw "done in 15 min" for "about 13 min")."""
    now = timezone.now()
    started = now - timedelta(seconds=started_ago) if started_ago is not None else None
    return Batch.objects.create(
        key=key, endpoint="/v1/chat/completions", input_file_id="file-0", status=status, total=total,
        created_at=(started or now) - timedelta(seconds=20), in_progress_at=started,
        expires_at=now + timedelta(hours=24), instance="another-appliance", runner_seen_at=now, **fields,
    )  # fmt: skip


def lines(batch: Batch, done: int, failed: int, ago: float) -> None:
    at = timezone.now() - timedelta(seconds=ago)
    refused = {"code": "context_length_exceeded", "message": "The prompt is longer than the model's context."}
    BatchLine.objects.bulk_create(
        BatchLine(
            batch=batch,
            index=i,
            custom_id=f"ticket-{i}",
            url=batch.endpoint,
            body={"model": "m"},
            state=LineState.DONE if i < done else LineState.FAILED,
            answered_at=at,
            answer={"custom_id": f"ticket-{i}", "response": {"status_code": 200 if i < done else 400}}
            | {"error": None if i < done else refused},
        )
        for i in range(done + failed)
    )
    Batch.objects.filter(pk=batch.pk).update(completed=done, failed=failed)


def world(django_user_model: Any) -> dict[str, Batch]:
    mia = django_user_model.objects.create_user("mia", "", "a-long-password-1")
    Member.objects.create(user=mia, role="member")
    laptop, _ = create_key("mia-laptop", mia)
    nightly, _ = create_key("evals-nightly", django_user_model.objects.get(username="admin"))
    # running longer than the rate's window (RATE_WINDOW, 600 s): its rate is the window's lines over the window, so
    # the ETA holds still however long the test takes to get to the page (started 240 s ago, 20 s late read 6 min)
    running = a_batch(nightly, Status.IN_PROGRESS, 1000, 900)
    lines(running, 412, 9, 60)
    fresh = a_batch(laptop, Status.IN_PROGRESS, 50, 5)
    now = timezone.now()
    done = a_batch(laptop, Status.COMPLETED, 200, 900, finalizing_at=now - timedelta(seconds=300))
    lines(done, 198, 2, 400)
    Batch.objects.filter(pk=done.pk).update(completed_at=now - timedelta(seconds=290))
    done.refresh_from_db()
    out = b"".join(json.dumps({"custom_id": f"ticket-{i}"}).encode() + b"\n" for i in range(198))
    done.output_file = files.store(laptop.pk, f"{done.public_id}_output.jsonl", Purpose.BATCH_OUTPUT, out, 198)
    done.error_file = files.store(laptop.pk, f"{done.public_id}_error.jsonl", Purpose.BATCH_OUTPUT, b"{}\n{}\n", 2)
    done.save()
    for _ in range(3):
        RequestLog.objects.create(
            created_at=now, api_key=laptop, model="m", surface="openai", endpoint="chat", status=200,
            duration_seconds=0.4, cost_usd=Decimal("0.000842"), priority="batch", batch_id=done.public_id,
        )  # fmt: skip
    cancelled = a_batch(nightly, Status.CANCELLED, 500, 1800, cancelling_at=now - timedelta(seconds=1600))
    lines(cancelled, 120, 0, 1650)
    Batch.objects.filter(pk=cancelled.pk).update(cancelled_at=now - timedelta(seconds=1598))
    cancelled.refresh_from_db()
    kept = out[: out.index(b"ticket-120")].rsplit(b"\n", 1)[0] + b"\n"  # its 120 finished lines
    name = f"{cancelled.public_id}_output.jsonl"
    cancelled.output_file = files.store(nightly.pk, name, Purpose.BATCH_OUTPUT, kept, 120)
    cancelled.save()
    return {"running": running, "fresh": fresh, "done": done, "cancelled": cancelled}


def signed_in(browser: Browser, web: str, scheme: str) -> tuple[Page, list[str]]:  # noqa: F811 - the fixture
    page = browser.new_context(
        base_url=web,
        viewport={"width": 1280, "height": 800},
        color_scheme=scheme,  # type: ignore[arg-type]
    ).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin-password-1")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{web}/")
    return page, errors


def shoot(page: Page, folder: Path, name: str) -> None:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    keep(path)


def test_the_batches_page_and_a_batchs_page_and_the_dashboards_queue_depth_light_and_dark(
    browser: Browser,  # noqa: F811 - the fixture
    web: str,
    admin_user: object,
    django_user_model: Any,
    tmp_path: Path,
) -> None:
    made = world(django_user_model)
    dep = a_deployment("chat-8b")
    client = redis.Redis.from_url(settings.REDIS_URL)
    entry = {"standard": 3, "batch": 12, "at": time.time() + 3600}  # an hour ahead: fresh all the test long
    client.hset(depth_key(dep.pk), "gw:1", json.dumps(entry))
    client.close()
    for scheme in ("light", "dark"):
        page, errors = signed_in(browser, web, scheme)
        page.goto("/batch-jobs/")
        running = page.locator(f"tr[data-batch={made['running'].public_id}]")
        expect(running.locator("[data-field=eta]")).to_have_text("about 13 min")  # 579 left at 42.1 a minute
        expect(page.locator(f"tr[data-batch={made['fresh'].public_id}] [data-field=eta]")).to_have_text(
            "no estimate yet"
        )
        done_bar = page.locator(f"tr[data-batch={made['done'].public_id}] .batch-bar .done")
        assert (done_bar.bounding_box() or {"width": 0})["width"] > 0  # data-width applied (hearth-page.js)
        page.wait_for_timeout(2500)  # one htmx refresh: the table swapped in again still has its bars' widths
        assert (done_bar.bounding_box() or {"width": 0})["width"] > 0
        shoot(page, tmp_path, f"batches-1280x800-{scheme}")
        page.goto(f"/batch-jobs/{made['running'].public_id}/")
        expect(page.locator("[data-field=status]")).to_have_text("in_progress")
        shoot(page, tmp_path, f"batch-running-1280x800-{scheme}")
        page.goto(f"/batch-jobs/{made['done'].public_id}/")
        shoot(page, tmp_path, f"batch-completed-1280x800-{scheme}")
        page.goto("/")
        expect(page.locator("tr[data-deployment=chat-8b] [data-field=held]")).to_have_text("3 standard · 12 batch held")
        shoot(page, tmp_path, f"dashboard-held-1280x800-{scheme}")
        assert errors == [], errors
        page.context.close()
