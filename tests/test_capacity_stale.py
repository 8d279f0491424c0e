"""A capacity check whose worker died (a crash, make down's cold shutdown of the long-task worker) ends as failed
once its heartbeat is STALE_AFTER old (console.capacity.runs), wherever it is looked at: its page, the API's run and
list, and a Cancel ends it at once. A fresh user's trial found such a run shown "running" for minutes, its Cancel
stuck at "cancelling", and new checks of the deployment refused meanwhile. One whose task was lost before it started
(still queued LOST_AFTER on, with no task waiting in the long queue) ends as failed too."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from appliance.celery_heartbeats import Liveness
from console.capacity import lost_tasks
from console.capacity.lost_tasks import STALE_AFTER
from console.capacity.models import CapacityRun, Tuning
from tests.test_console_display import a_deployment

pytestmark = pytest.mark.django_db
SILENT = STALE_AFTER + timedelta(seconds=1)


def running(name: str, silent_for: timedelta) -> CapacityRun:
    """A running check of a new ready deployment ``name``, its last heartbeat ``silent_for`` ago."""
    return CapacityRun.objects.create(
        deployment=a_deployment(name), deployment_name=name, profile="chat", mode="concurrency", levels=[1, 10],
        requests_per_level=4, max_seconds=60, shape={"prompt_tokens": 100, "output_tokens": 10}, state="running",
        started_at=timezone.now() - silent_for, heartbeat_at=timezone.now() - silent_for,
        progress_text="Level 1 of 2 (1 users): 3 of 4 requests answered",
    )  # fmt: skip


def test_a_run_whose_worker_fell_silent_reads_failed_on_its_page_and_in_the_api(admin: Client) -> None:
    alive, orphan = running("alive", timedelta(seconds=5)), running("orphan", SILENT)
    assert admin.get(f"/api/capacity-checks/{alive.pk}").json()["state"] == "running"
    answer = admin.get(f"/api/capacity-checks/{orphan.pk}").json()
    said = "Its worker stopped answering (restarted or crashed)."
    assert (answer["state"], answer["state_reason"]) == ("failed", said)
    other = running("listed", SILENT)
    assert [r["state"] for r in admin.get(f"/api/deployments/{other.deployment_id}/capacity-checks").json()] == [
        "failed"
    ]
    paged = running("paged", SILENT)
    assert "Its worker stopped answering" in admin.get(f"/capacity/runs/{paged.pk}/").content.decode()
    assert CapacityRun.objects.get(pk=paged.pk).state == "failed"


def test_a_cancel_of_a_run_whose_worker_fell_silent_ends_it_at_once(admin: Client) -> None:
    stuck, unseen = running("stuck", SILENT), running("unseen", SILENT)
    CapacityRun.objects.filter(pk=unseen.pk).update(state="cancelling")  # a cancel its worker never saw
    for run in (stuck, unseen):
        answer = admin.post(f"/api/capacity-checks/{run.pk}/cancel")
        assert answer.status_code == 202, answer.content
        assert (answer.json()["state"], answer.json()["state_reason"]) == (
            "cancelled",
            "Cancelled. Its worker stopped answering (restarted or crashed).",
        )


def tuning(name: str, silent_for: timedelta | None, created_ago: timedelta = timedelta(0)) -> Tuning:
    """A running tuning of a new ready deployment ``name``, its last heartbeat ``silent_for`` ago (None: none
    kept, as a tuning from before the heartbeat was), created ``created_ago``."""
    return Tuning.objects.create(
        deployment=a_deployment(name), deployment_name=name, knob="max_num_seqs", values=[256, 64],
        check_settings={}, state="running", step=1, created_at=timezone.now() - created_ago,
        heartbeat_at=None if silent_for is None else timezone.now() - silent_for,
    )  # fmt: skip


def test_a_tuning_whose_worker_fell_silent_reads_failed_and_its_cancel_ends_it_at_once(admin: Client) -> None:
    alive, orphan = tuning("alive", timedelta(seconds=5)), tuning("orphan", SILENT)
    older = tuning("older", None, created_ago=SILENT)  # migrated from before the heartbeat: no heartbeat kept
    assert admin.get(f"/api/tunings/{alive.pk}").json()["state"] == "running"
    for row in (orphan, older):
        answer = admin.get(f"/api/tunings/{row.pk}").json()
        assert (answer["state"], answer["state_reason"]) == (
            "failed",
            "Its worker stopped answering (restarted or crashed). The values measured before are kept.",
        )
    paged = tuning("paged", SILENT)
    assert admin.get(f"/deployments/{paged.deployment_id}/capacity/").status_code == 200
    assert Tuning.objects.get(pk=paged.pk).state == "failed"  # no longer holding the deployment's one tuning
    stuck = tuning("stuck", SILENT)
    answer = admin.post(f"/api/tunings/{stuck.pk}/cancel")
    assert answer.status_code == 202, answer.content
    assert answer.json()["state"] == "cancelled" and answer.json()["state_reason"].startswith("Cancelled. Its worker")


def test_a_check_or_tuning_whose_task_was_lost_before_it_started_reads_failed_once_no_task_waits(
    admin: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task lost with a Redis restarted empty left its check queued for ever, and the deployment's one check held
    (a new one refused); a Cancel was the only way out."""
    waiting = [1]
    monkeypatch.setattr(
        lost_tasks.celery_heartbeats, "read", lambda: Liveness(0.0, None, None, long_waiting=waiting[0])
    )
    lost_ago = lost_tasks.LOST_AFTER + timedelta(seconds=1)
    check, fresh = running("lost", timedelta(0)), running("fresh", timedelta(0))
    CapacityRun.objects.filter(pk=check.pk).update(state="queued", created_at=timezone.now() - lost_ago)
    CapacityRun.objects.filter(pk=fresh.pk).update(state="queued")
    kept = tuning("kept", None, created_ago=lost_ago)
    Tuning.objects.filter(pk=kept.pk).update(state="queued")
    assert admin.get(f"/api/capacity-checks/{check.pk}").json()["state"] == "queued"  # a task waits: maybe its
    waiting[0] = 0
    answer = admin.get(f"/api/capacity-checks/{check.pk}").json()
    assert (answer["state"], answer["state_reason"]) == ("failed", lost_tasks.LOST_WORDS)
    assert admin.get(f"/api/capacity-checks/{fresh.pk}").json()["state"] == "queued"  # not that long yet
    assert admin.get(f"/api/tunings/{kept.pk}").json()["state_reason"] == lost_tasks.LOST_WORDS
