"""Tasks are enqueued by name (console.deployments.dispatch, the pre-flight check, beat): every name sent is
a task the worker registers, so a renamed task fails here, not silently in the queue."""

from appliance.celery import app
from console.alerts.tasks import EVALUATE
from console.audit.tasks import PRUNE
from console.batches.dispatch import SWEEP
from console.deployments import dispatch
from console.observability.tasks import CHECK_ACCOUNTING, MAINTAIN, PUBLISH_GPUS, SCRAPE
from console.preflight.worker_report import RUN_PREFLIGHT


def registered() -> set[str]:
    app.loader.import_default_modules()
    return set(app.tasks)


def test_every_name_the_deployments_dispatch_sends_is_a_registered_task() -> None:
    assert set(dispatch.NAMES) <= registered()


def test_the_pre_flight_and_scrape_tasks_are_registered_under_the_names_they_are_sent_by() -> None:
    assert {RUN_PREFLIGHT, SCRAPE} <= registered()


def test_every_periodic_task_beat_sends_is_registered() -> None:
    app.finalize()
    schedule = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert schedule == {SCRAPE, dispatch.RECONCILE, PRUNE, PUBLISH_GPUS, MAINTAIN, CHECK_ACCOUNTING, EVALUATE, SWEEP}
    assert schedule <= registered()
