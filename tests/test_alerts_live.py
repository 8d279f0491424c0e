"""Alerts against real processes and real receivers (issue 31's acceptance): a killed engine, stalled /metrics
(an engine stopped with SIGSTOP), a saturated simulator, a stopped Celery beat, a key's budget crossed by real
requests and an engine out of memory at start each fire once to a webhook server the test starts, and resolve when
the condition ends. The session's worker and beat run the alert tasks (tasks.evaluate_alerts every
HEARTH_ALERT_INTERVAL); the tests also evaluate in this process, as often as they poll, so a condition shorter than
beat's period is still seen; the rule's row lock keeps the two from sending the same news twice."""

import contextlib
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from decimal import Decimal

import httpx
import openai
import pytest

from appliance import celery_heartbeats
from console.access.models import ApiKey
from console.alerts import delivery
from console.alerts.evaluate import evaluate
from console.alerts.models import THRESHOLD, AlertRule, Delivery, Destination
from console.alerts.rules import rules
from console.alerts.tasks import evaluate_alerts
from console.deployments.models import Replica
from console.observability.models import PriceSetting
from tests.alert_receivers import Webhook, webhook
from tests.conftest import Workers, login
from tests.simworld import Served, deploy, ensure_model, wait_state
from tests.test_celery_heartbeats import Celery, celery

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]
__all__ = ["celery", "webhook"]  # fixtures
SECRET = "T000/B000/XXXXsecretXXXX"
PROMPT = "Tell me a long story about a lighthouse keeper and the sea. " * 200  # ~2,600 tokens: a cent in a few


def only(kind: str, webhook: Webhook, **tuned: float) -> None:
    """Rule ``kind`` alone on, tuned; the others' open alerts resolved before the webhook is set."""
    rules()
    AlertRule.objects.exclude(kind=kind).update(enabled=False)
    AlertRule.objects.filter(kind=kind).update(enabled=True, **tuned)
    evaluate_alerts()
    Destination.objects.update_or_create(pk=1, defaults={"webhook_url": f"{webhook.url}/hooks/{SECRET}"})


def news(webhook: Webhook, kind: str) -> list[tuple[str, str]]:
    """(event, subject) of each webhook post about ``kind``, in order."""
    return [(b["event"], b["alert"]["subject"]) for b in webhook.bodies() if b["alert"]["kind"] == kind]


def until(
    done: Callable[[], bool],
    within: float,
    evaluate_here: Callable[[], object] = evaluate_alerts,
    worker: Workers | None = None,
) -> None:
    """Evaluate the rules here every second (beat does too) until ``done()``; fail after ``within`` seconds, with the
    end of ``worker``'s log when it is given (what the worker did with the news, or what held it)."""
    deadline = time.monotonic() + within
    while not done():
        if time.monotonic() >= deadline:
            pytest.fail(
                "not within the deadline" + (f"; the worker's log ends:\n{worker.output()[-8000:]}" if worker else "")
            )
        evaluate_here()
        time.sleep(1)


def fired_then_resolved(webhook: Webhook, kind: str) -> None:
    events = news(webhook, kind)
    assert [e for e, _ in events] == ["fired", "resolved"], events
    assert events[0][1] == events[1][1]


def test_a_killed_engine_fires_replica_not_ready_once_and_resolves_when_it_serves_again(
    served: Served, webhook: Webhook
) -> None:
    only("replica_not_ready", webhook, for_minutes=0, repeat_minutes=60)
    replica = Replica.objects.get(deployment_id=served.dep_id, running=True)
    os.kill(int(replica.handle), signal.SIGKILL)
    until(lambda: ("fired", f"replica {replica.runtime_name}") in news(webhook, "replica_not_ready"), 60)
    # not running yet, or relaunched already when a busy box evaluated the rule after the worker's reconcile
    message = webhook.bodies()[0]["alert"]["message"]
    assert re.search(
        r"is not ready: (not running|loading again( for [^(]+)? after its engine ended) \(exit", message
    ), message
    until(lambda: len(news(webhook, "replica_not_ready")) >= 2, 90)
    assert wait_state(served.client, served.dep_id, {"ready"})["state"] == "ready"
    fired_then_resolved(webhook, "replica_not_ready")
    assert webhook.bodies()[-1]["text"].startswith(
        f"[Hearth {socket.gethostname()}] RESOLVED: Replica not ready: Resolved (the condition"
    )


def test_stalled_metrics_fire_monitoring_stale_once_and_resolve_when_scrapes_come_back(
    served: Served, webhook: Webhook
) -> None:
    only("monitoring_stale", webhook, threshold=2, for_minutes=0, repeat_minutes=60)
    replica = Replica.objects.get(deployment_id=served.dep_id, running=True)
    os.kill(int(replica.handle), signal.SIGSTOP)  # the engine stops answering, /metrics included
    try:
        until(lambda: bool(news(webhook, "monitoring_stale")), 60)
        assert webhook.bodies()[0]["alert"]["message"].startswith(f"No good scrape of replica {replica.runtime_name}")
    finally:
        os.kill(int(replica.handle), signal.SIGCONT)
    until(lambda: len(news(webhook, "monitoring_stale")) >= 2, 60)
    fired_then_resolved(webhook, "monitoring_stale")


def test_a_saturated_simulator_fires_requests_waiting_once_and_resolves_when_the_queue_drains(
    web: str, worker: object, admin_user: object, webhook: Webhook
) -> None:
    client = login(web)
    ensure_model()
    resp = client.post(
        "/api/deployments",
        json={
            "name": "queued",
            "model": "llama-8b",
            "engine": "simulator",
            "max_model_len": 8192,
            "max_num_seqs": 1,
            "extra_args": ["--decode-ms-per-token", "150"],
        },
    )
    assert resp.status_code == 201, resp.text
    dep_id = resp.json()["id"]
    assert client.post(f"/api/deployments/{dep_id}/launch").status_code == 202
    try:
        assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
        key = client.post("/api/keys", json={"name": "load"}).json()["key"]
        only("requests_waiting", webhook, threshold=2, for_minutes=0, repeat_minutes=60)

        def ask() -> None:
            body = {"model": "queued", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 60}
            httpx.post(f"{web}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120)

        load = [threading.Thread(target=ask) for _ in range(5)]  # one runs at a time: four wait, then fewer
        for t in load:
            t.start()
        until(lambda: bool(news(webhook, "requests_waiting")), 60)
        assert "requests waiting" in webhook.bodies()[0]["alert"]["message"]
        for t in load:
            t.join(120)
        until(lambda: len(news(webhook, "requests_waiting")) >= 2, 60)
        fired_then_resolved(webhook, "requests_waiting")
    finally:
        client.post(f"/api/deployments/{dep_id}/stop")
        wait_state(client, dep_id, {"stopped", "failed"})


def beat_started_here(since: float) -> Callable[[], bool]:
    """Whether a beat has given a sign of life since ``since`` (epoch seconds): the test's own. The session's beat,
    stopped by the ``celery`` fixture just before, still reads as running until its silence passes the limit, and
    on a loaded box the test's beat took longer than that to start (its first tasks were never sent) and was
    taken for stopped."""

    def seen() -> bool:
        beat = celery_heartbeats.read().beat
        return beat is not None and beat.at is not None and beat.at >= since

    return seen


def sent_here() -> None:
    """Evaluate here and send the news here (the session's worker is stopped for this test)."""
    for delivery_id in evaluate():
        while delivery.attempt(delivery_id) is not None:
            pass


def test_a_stopped_beat_fires_monitoring_stale_once_and_resolves_when_beat_runs_again(
    celery: Celery, webhook: Webhook
) -> None:
    started = time.time()
    celery.start_beat()
    until(beat_started_here(started), 60, lambda: None)
    # beat runs before the rule is tuned: the session's beat, stopped by the fixture, may have been silent long
    # enough to fire it then, before the webhook was set, and its resolution would then be the webhook's first news
    only("monitoring_stale", webhook, for_minutes=0, repeat_minutes=60)
    sent_here()
    assert news(webhook, "monitoring_stale") == []
    assert celery.beat is not None
    celery.beat.crash()
    until(lambda: bool(news(webhook, "monitoring_stale")), 60, sent_here)
    assert webhook.bodies()[0]["alert"]["message"].startswith("Celery beat has not run for ")
    celery.beat.restart()
    until(lambda: len(news(webhook, "monitoring_stale")) >= 2, 60, sent_here)
    fired_then_resolved(webhook, "monitoring_stale")
    assert news(webhook, "monitoring_stale")[0][1] == "celery beat"


def test_a_killed_upkeep_worker_is_told_by_the_long_task_worker_and_resolves_when_it_runs_again(
    celery: Celery, webhook: Webhook
) -> None:
    """A trial's kill -9 of the upkeep worker, which runs every evaluation, went unreported for minutes: the long-task
    worker evaluates in its own queue meanwhile and sends the news from there (nothing is evaluated here)."""
    started = time.time()
    celery.start_worker()
    celery.start_beat()
    beat_seen = beat_started_here(started)
    until(lambda: beat_seen() and not celery_heartbeats.read().worker_stopped(), 60, lambda: None)
    only("monitoring_stale", webhook, for_minutes=0, repeat_minutes=60)
    assert news(webhook, "monitoring_stale") == [] and celery.worker is not None
    celery.worker.upkeep.crash()  # told once it is silent past its limit and the long one has run UPKEEP_GRACE
    until(lambda: bool(news(webhook, "monitoring_stale")), 90, lambda: None, celery.worker)
    fired = webhook.bodies()[0]["alert"]
    assert (fired["subject"], fired["message"][:33]) == ("celery worker", "The upkeep worker is not running ")
    celery.worker.upkeep.restart()
    until(lambda: len(news(webhook, "monitoring_stale")) >= 2, 60, lambda: None, celery.worker)
    fired_then_resolved(webhook, "monitoring_stale")


def test_a_budget_crossed_by_real_requests_fires_once_and_resolves_when_the_budget_is_raised(
    served: Served, webhook: Webhook
) -> None:
    PriceSetting.objects.get_or_create(gpu_model="NVIDIA H100 80GB HBM3", defaults={"usd_per_gpu_hour": "3.00"})
    made = served.client.post("/api/keys", json={"name": "budgeted", "daily_budget_usd": "0.01"})
    assert made.status_code == 201, made.text
    key = ApiKey.objects.get(name="budgeted")
    only("budget", webhook, repeat_minutes=60)
    llm = openai.OpenAI(base_url=f"{served.web}/v1", api_key=made.json()["key"], max_retries=0, timeout=60)

    def spend() -> None:
        with contextlib.suppress(openai.RateLimitError):  # over its budget: refused, as it should be
            llm.chat.completions.create(model="llama", messages=[{"role": "user", "content": PROMPT}], max_tokens=256)
        evaluate_alerts()

    until(lambda: ("fired", f"key {key.pk} today at {THRESHOLD}") in news(webhook, "budget"), 180, spend)
    ApiKey.objects.filter(pk=key.pk).update(daily_budget_usd=Decimal("1000"))  # an admin raises it
    until(lambda: ("resolved", f"key {key.pk} today at {THRESHOLD}") in news(webhook, "budget"), 60)
    assert [e for e, s in news(webhook, "budget") if s.endswith(f"at {THRESHOLD}")] == ["fired", "resolved"]


def test_an_engine_out_of_memory_at_start_fires_deployment_failed_once_and_resolves_when_deleted(
    web: str, worker: object, admin_user: object, webhook: Webhook
) -> None:
    client = login(web)
    only("deployment_failed", webhook, repeat_minutes=60)
    dep_id = deploy(web, client, "oom-alert", ["--fault-oom-at-start"])
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "failed"
    until(lambda: bool(news(webhook, "deployment_failed")), 60)
    said = webhook.bodies()[0]["alert"]["message"]
    assert said.startswith("oom-alert failed: ") and "CUDA out of memory" in said
    assert client.delete(f"/api/deployments/{dep_id}").status_code in {200, 204}  # an admin deletes it
    until(lambda: len(news(webhook, "deployment_failed")) >= 2, 60)
    fired_then_resolved(webhook, "deployment_failed")


def test_the_worker_retries_a_failing_webhook_after_its_backoff_and_sends_it_once(
    worker: Workers, webhook: Webhook
) -> None:
    only("weights_disk", webhook, threshold=0, for_minutes=0)
    webhook.failures = [503]
    AlertRule.objects.filter(kind="weights_disk").update(threshold=1e12)  # no disk has a zettabyte free: it holds
    evaluate_alerts()  # the news goes to the worker (tasks.deliver), which meets the 503 and tries again
    # a 10 s backoff; the bound leaves room for a worker whose three processes are all busy on a loaded 2-core box
    until(lambda: bool(webhook.posts), 120, lambda: None, worker)
    sent_once = Delivery.objects.get(alert__rule__kind="weights_disk")
    assert sent_once.attempts == 2 and sent_once.sent_at is not None and "503" in sent_once.last_error
    assert [e for e, _ in news(webhook, "weights_disk")] == ["fired"]
