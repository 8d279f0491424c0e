"""Whether Celery beat and a worker run, as the console says it (appliance.celery_heartbeats, the header in
templates/base.html, console.deployments.state_caveats): words and limits on plain values, then real processes,
a web server, a worker and beat of their own, each killed with SIGKILL in turn."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import redis
from django.conf import settings
from django.test import Client, override_settings
from django.utils import timezone

from appliance import celery_heartbeats
from appliance.celery_heartbeats import Heartbeat, Liveness, limit_for
from appliance.celery_queues import LONG_QUEUE
from appliance.redis_keys import redis_key
from console.alerts.models import Alert
from console.deployments.models import Deployment, DeploymentState
from console.deployments.state_caveats import caveats
from tests.conftest import Proc, Workers, login
from tests.simworld import deploy, wait_state

NOW = 1_800_000_000.0


def test_beat_is_stopped_after_two_of_its_periods_and_a_worker_after_its_heartbeat_and_the_slack() -> None:
    assert limit_for(5.0) == 10.0  # the default scrape interval: "within 2 intervals"
    assert limit_for(2.0) == 7.0  # Celery's worker heartbeat: 2 s, and 5 s of slack for a starved CPU
    assert limit_for(30.0) == 60.0
    assert Heartbeat(NOW - 10.0, 5.0).running(NOW) and not Heartbeat(NOW - 10.5, 5.0).running(NOW)
    assert not Heartbeat(None, 0.0).running(NOW) and not Heartbeat(NOW, 2.0, stopped=True).running(NOW)


def test_the_words_say_which_stopped_for_how_long_and_since_when() -> None:
    both = Liveness(NOW, Heartbeat(NOW - 47.0, 5.0), Heartbeat(NOW - 200.0, 2.0))
    assert both.beat_stopped().startswith("Celery beat has not run for 47 s, since ")
    assert both.worker_stopped().startswith("no worker has answered for 3 min, since ")
    stopped = Liveness(NOW, Heartbeat(NOW - 1.0, 5.0), Heartbeat(NOW - 30.0, 2.0, stopped=True))
    assert stopped.beat_stopped() == "" and stopped.worker_stopped().startswith("the last worker stopped 30 s ago, at ")
    never = Liveness(NOW, Heartbeat(None, 0.0), Heartbeat(None, 0.0))
    assert (never.beat_stopped(), never.worker_stopped()) == (
        "Celery beat has never run here",
        "no worker has ever run here",
    )
    unknown = Liveness(NOW, None, None, "Redis did not answer (ConnectionError)")
    assert unknown.beat_stopped() == unknown.worker_stopped() == ""


def test_one_never_seen_is_not_called_stopped_on_a_redis_that_just_started() -> None:
    """compose's Redis keeps nothing across a restart: "never run here" showed for seconds, the worker running."""
    fresh = Liveness(NOW, Heartbeat(None, 0.0), Heartbeat(None, 0.0), redis_up_for=4.0)
    assert fresh.beat_stopped() == fresh.worker_stopped() == ""
    later = Liveness(NOW, Heartbeat(None, 0.0), Heartbeat(None, 0.0), redis_up_for=15.0)
    assert later.worker_stopped() == "no worker has ever run here"
    silent = Liveness(NOW, Heartbeat(NOW - 60.0, 5.0), Heartbeat(None, 0.0), redis_up_for=4.0)
    assert silent.beat_stopped().startswith("Celery beat has not run for 1 min")  # seen, then silent: said at once
    assert celery_heartbeats.read().redis_up_for is not None  # the real Redis's INFO


def _dep(state: str, since: float, now: float) -> Deployment:
    return Deployment(name="d", state=state, state_since=datetime.fromtimestamp(now - since, UTC))


def test_a_deployment_says_what_waits_for_a_missing_worker_and_that_its_state_is_not_checked_without_beat() -> None:
    now = float(int(time.time()))  # whole seconds: a datetime keeps microseconds only
    dead = Liveness(now, Heartbeat(now - 12.0, 5.0), Heartbeat(now - 40.0, 2.0))
    said = {c.kind: c.words for c in caveats(_dep(DeploymentState.STOPPING, 30, now), dead)}
    assert said["no-worker"].startswith(
        "No worker is taking this stop (asked 30 s ago): no worker has answered for 40 s"
    )
    assert said["monitoring-stopped"].startswith("Monitoring stopped: Celery beat has not run for 12 s")
    ready = {c.kind: c.words for c in caveats(_dep(DeploymentState.READY, 300, now), dead)}
    assert ready["no-worker"].startswith("No worker is running, so nothing checks this engine")
    alive = Liveness(now, Heartbeat(now - 1.0, 5.0), Heartbeat(now - 1.0, 2.0))
    assert caveats(_dep(DeploymentState.STOPPING, 30, now), alive) == []
    assert (
        caveats(_dep(DeploymentState.STOPPED, 30, now), dead) == []
        and caveats(_dep(DeploymentState.FAILED, 30, now), dead) == []
    )
    unknown = caveats(
        _dep(DeploymentState.READY, 30, now), Liveness(now, None, None, "Redis did not answer (TimeoutError)")
    )
    assert [c.kind for c in unknown] == ["liveness-unknown"]


def test_each_queue_has_its_own_worker_and_a_launch_waits_on_the_long_one() -> None:
    now = float(int(time.time()))
    upkeep, long = Heartbeat(now - 1.0, 2.0, queues=("celery",)), Heartbeat(now - 40.0, 2.0, queues=("long",))
    found = Liveness(now, Heartbeat(now - 1.0, 5.0), upkeep, long_worker=long)
    assert found.worker_stopped() == ""
    assert found.long_worker_stopped().startswith("no long-task worker has answered for 40 s, since ")
    said = {c.kind: c.words for c in caveats(_dep(DeploymentState.PULLING, 30, now), found)}
    assert said["no-worker"].startswith("No worker is taking this launch (asked 30 s ago): no long-task worker has")
    assert caveats(_dep(DeploymentState.STOPPING, 30, now), found) == []  # a stop is the upkeep worker's
    assert caveats(_dep(DeploymentState.LOADING, 30, now), found) == []  # so are the loading replica's health polls
    busy = Liveness(now, Heartbeat(now - 1.0, 5.0), upkeep, long_worker=upkeep, long_waiting=3)
    said = {c.kind: c.words for c in caveats(_dep(DeploymentState.PENDING, 30, now), busy)}
    assert said["queued"].startswith("The long-task worker is busy: 3 tasks wait in its queue for a free process")
    assert caveats(_dep(DeploymentState.PULLING, 30, now), busy) == []  # its turn came
    assert [c.kind for c in caveats(_dep(DeploymentState.PENDING, 30, now), replace(busy, long_worker=long))] == [
        "no-worker"  # no worker runs for it at all: that is what the page says
    ]
    before = Heartbeat(now - 1.0, 2.0)  # a worker noted before the two queues took every task
    assert before.takes("celery") and before.takes("long") and not upkeep.takes("long")


def note_long_worker(stopped: bool = False) -> None:
    """A long-task worker's heartbeat, as one on another host notes it (this process's field is the upkeep's)."""
    note = json.dumps({"at": time.time(), "every": 2.0, "stopped": stopped, "queues": [LONG_QUEUE]})
    redis.Redis.from_url(settings.REDIS_URL).hset(redis_key("celery-workers"), "elsewhere pid 1", note)


@pytest.fixture
def own_instance() -> Iterator[str]:
    """An instance name of the test's own, so the heartbeats of the session's worker and beat (if they run) are not
    read; its Redis keys are removed after."""
    name = f"heartbeats-{uuid.uuid4().hex[:8]}"
    with override_settings(HEARTH_INSTANCE=name):
        yield name
        keys = list(redis.Redis.from_url(settings.REDIS_URL).scan_iter(f"hearth:{name}:*"))
        if keys:
            redis.Redis.from_url(settings.REDIS_URL).delete(*keys)


def liveness_in_header(page: str) -> dict[str, str]:
    return dict(re.findall(r'<p class="liveness" role="alert" data-field="([a-z-]+)">(.*?)</p>', page, re.S))


@pytest.mark.django_db
def test_every_page_s_header_warns_until_beat_and_a_worker_note_that_they_run(admin: Client, own_instance: str) -> None:
    warned = liveness_in_header(admin.get("/deployments/").content.decode())
    assert warned["beat-stopped"].startswith("Monitoring stopped: Celery beat has never run here.")
    assert warned["worker-stopped"].startswith("No worker is running: launches and stops wait, and nothing is scraped")
    assert "(no worker has ever run here)" in warned["worker-stopped"]
    celery_heartbeats.note_beat(5.0)  # as beat does for each task it sends
    celery_heartbeats.note_worker(SimpleNamespace(interval=2.0))  # as Celery's worker heartbeat does (the upkeep's)
    warned = liveness_in_header(admin.get("/keys/").content.decode())
    assert list(warned) == ["long-worker-stopped"], warned
    assert warned["long-worker-stopped"].startswith(
        "No worker takes the long tasks: launches, batches and capacity checks wait (no long-task worker has ever run"
    )
    assert "docker compose up -d worker-long" in warned["long-worker-stopped"]
    note_long_worker()
    assert liveness_in_header(admin.get("/keys/").content.decode()) == {}
    celery_heartbeats.note_worker_stopped()
    warned = liveness_in_header(admin.get("/keys/").content.decode())
    assert warned["worker-stopped"].startswith("No upkeep worker is running: stops, sleeps and wakes wait")
    assert "(the last worker stopped 0 s ago, at " in warned["worker-stopped"] and "beat-stopped" not in warned
    note_long_worker(stopped=True)
    warned = liveness_in_header(admin.get("/keys/").content.decode())
    assert list(warned) == ["worker-stopped"] and warned["worker-stopped"].startswith("No worker is running: ")


@pytest.mark.django_db
def test_the_dashboard_names_why_the_scraper_is_silent(admin: Client, own_instance: str) -> None:
    ready_long = timezone.now() - timedelta(minutes=5)  # past the scrapes it would have had: their lack is a silence
    Deployment.objects.create(
        name="d",
        engine="simulator",
        served_model_name="d",
        max_model_len=0,
        kv_space_gib=0,
        plan={},
        state="ready",
        state_since=ready_long,
    )
    page = admin.get("/").content.decode()
    cause = re.search(r'data-field="scraper_silence_cause">(.*?)</span>', page)
    assert cause is not None and cause.group(1) == "No worker is running (no worker has ever run here).", page[:3000]
    celery_heartbeats.note_worker(SimpleNamespace(interval=2.0))
    cause = re.search(r'data-field="scraper_silence_cause">(.*?)</span>', admin.get("/").content.decode())
    assert cause is not None and cause.group(1) == "Celery beat has never run here."


# Real processes: the session's worker (beat embedded) is stopped for the test, and started again after it.
PERIOD = 5.0  # seconds: beat's shortest period here (scrape, reconcile, accounting check), the default scrape interval
QUICK = {
    "HEARTH_SCRAPE_INTERVAL": str(PERIOD),
    "HEARTH_ALERT_INTERVAL": str(PERIOD),
    "HEARTH_RECONCILE_INTERVAL": str(PERIOD),
    "HEARTH_ACCOUNTING_CHECK_INTERVAL": str(PERIOD),
}


@dataclass
class Celery:
    """Workers and beat of the test's own, each its own process (as `make up` runs them)."""

    env: dict[str, str]
    folder: Path
    worker: Workers | None = None
    beat: Proc | None = None

    def start_worker(self) -> None:
        if self.worker is None:
            self.worker = Workers(self.env, self.folder, beat=False)
        else:
            self.worker.restart()

    def start_beat(self) -> None:
        argv = [sys.executable, "-m", "celery", "-A", "appliance", "beat", "--loglevel", "INFO"]
        self.beat = Proc([*argv, "-s", str(self.folder / "schedule")], self.env, self.folder / "beat.log")

    def stop(self) -> None:
        procs = [*(self.worker.procs if self.worker else ()), *([self.beat] if self.beat else [])]
        for proc in procs:
            if _group_alive(proc.proc.pid):
                stop_group(proc)


def stop_group(proc: Proc) -> None:
    """SIGTERM to the process and its children, SIGKILL after 20 s: a worker's embedded beat outlives a worker
    stopped alone, and keeps beat's heartbeat fresh."""
    os.killpg(proc.proc.pid, signal.SIGTERM)
    try:
        proc.proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait()
    deadline = time.monotonic() + 20
    while _group_alive(proc.proc.pid):
        assert time.monotonic() < deadline, f"process group {proc.proc.pid} still runs"
        time.sleep(0.2)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` runs (a zombie, waiting for its reaper, does not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@pytest.fixture
def celery(live_env: dict[str, str], web: str, worker: Workers, tmp_path: Path) -> Iterator[Celery]:
    for proc in worker.procs:  # the session's workers, the upkeep one with its embedded beat
        stop_group(proc)
    own = Celery({**live_env, **QUICK, "HEARTH_GATEWAY_URL": web}, tmp_path)
    try:
        yield own
    finally:
        own.stop()
        worker.restart()


def header(client: httpx.Client) -> dict[str, str]:
    """The header's warnings on the dashboard, by data-field."""
    page = client.get("/").text
    return dict(re.findall(r'<p class="liveness" role="alert" data-field="([a-z-]+)">(.*?)</p>', page, re.S))


def page_caveats(client: httpx.Client, dep_id: int) -> dict[str, str]:
    page = client.get(f"/deployments/{dep_id}/status/").text
    return dict(re.findall(r'<p class="warn banner" data-field="([a-z-]+)">(.*?)</p>', page, re.S))


def poll(seconds: float, read: object, every: float = 0.25) -> tuple[object, float]:
    """Call ``read()`` until it returns something true; (that, seconds it took). Fails after ``seconds``."""
    began = time.monotonic()
    while not (found := read()):  # type: ignore[operator]
        assert time.monotonic() - began < seconds, f"nothing within {seconds} s"
        time.sleep(every)
    return found, time.monotonic() - began


@pytest.mark.django_db(transaction=True)
def test_beat_killed_then_the_worker_killed_and_a_stop_the_header_and_the_page_say_so(
    web: str, celery: Celery, admin_user: object
) -> None:
    client = login(web)
    celery.start_worker()
    celery.start_beat()
    poll(30, lambda: header(client) == {})  # both running: no warning
    dep_id = deploy(web, client, "truth")
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    assert page_caveats(client, dep_id) == {}

    assert celery.beat is not None and celery.worker is not None
    os.killpg(celery.beat.proc.pid, signal.SIGKILL)
    warned, took = poll(2 * PERIOD + 2, lambda: header(client).get("beat-stopped"))
    assert took <= 2 * PERIOD + 1, f"the header said beat stopped {took:.1f} s after its kill, over 2 × {PERIOD} s"
    assert str(warned).startswith("Monitoring stopped: Celery beat has not run for ")
    said = page_caveats(client, dep_id)
    assert said["monitoring-stopped"].startswith("Monitoring stopped: Celery beat has not run for "), said
    assert "no-worker" not in said and "worker-stopped" not in header(client)  # the worker still runs
    # beat sends every evaluation of the alert rules: the worker sends it while beat is stopped, so this one fires
    fired = Alert.objects.filter(subject="celery beat", fired_at__isnull=False, resolved_at=None)
    alert, _ = poll(3 * PERIOD, lambda: fired.first())
    assert str(getattr(alert, "message", "")).startswith("Celery beat has not run for "), alert

    celery.worker.crash()  # both workers: the header says so once each has been silent past its limit
    both = "up -d worker worker-long"
    warned, _ = poll(7 + 3, lambda: both in (said := header(client).get("worker-stopped", "")) and said)
    assert str(warned).startswith("No worker is running: launches and stops wait, and nothing is scraped (no worker")
    cause = re.search(r'data-field="scraper_silence_cause">(.*?)</span>', client.get("/").text)
    assert cause is not None and cause.group(1).startswith("No worker is running (no worker has answered for ")
    assert client.post(f"/api/deployments/{dep_id}/stop").status_code == 202
    said = page_caveats(client, dep_id)
    assert "stopping" in client.get(f"/deployments/{dep_id}/status/").text
    assert said["no-worker"].startswith("No worker is taking this stop (asked "), said
    assert "It goes on once a worker runs." in said["no-worker"]
    answer = client.get(f"/api/deployments/{dep_id}").json()
    assert [c["kind"] for c in answer["caveats"]] == ["no-worker", "monitoring-stopped"], answer["caveats"]

    celery.start_worker()  # the stop is taken, and the page says no more
    celery.start_beat()
    assert wait_state(client, dep_id, {"stopped", "failed"}, within=60)["state"] == "stopped"
    poll(30, lambda: header(client) == {} and page_caveats(client, dep_id) == {})
    assert client.get(f"/api/deployments/{dep_id}").json()["caveats"] == []
