"""The two Celery queues (appliance.celery_queues): each task goes to the upkeep queue or the long one, every way
the appliance runs (scripts/up.sh, compose.yaml, the tests' Workers) starts a worker for each, and with the long
worker's whole pool held by weights downloads (the stand-in hub, tests/standin_hub.py, holding each mid-file) a
stop is still taken at once, by the upkeep worker, and a launch sent meanwhile waits its turn in Redis, its page
saying so."""

import itertools
import re
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from django.test import override_settings

from appliance import celery_heartbeats
from appliance.celery import app
from appliance.celery_queues import LONG_QUEUE, LONG_TASKS, UPKEEP_QUEUE
from console.deployments.models import Deployment
from console.deployments.state_caveats import caveats
from tests.conftest import ROOT, Proc, Workers
from tests.standin_hub import standin_hub
from tests.weightsworld import COMMIT, HOLD_AT, REPO, deployment, files, launch_env, model

LONG_POOL = 2  # the tests' long worker's processes (tests.conftest.Workers)


def queue_of(name: str) -> str:
    return str(app.amqp.router.route({}, name)["queue"].name)


def test_each_task_goes_to_the_upkeep_queue_or_the_long_one() -> None:
    app.loader.import_default_modules()  # the tasks modules, as the worker imports them
    ours = {name for name in app.tasks if not name.startswith("celery.")}
    assert LONG_TASKS <= ours  # every long name is a task's
    assert {name: queue_of(name) for name in ours} == {
        name: LONG_QUEUE if name in LONG_TASKS else UPKEEP_QUEUE for name in ours
    }
    assert queue_of("console.observability.tasks.scrape_metrics") == UPKEEP_QUEUE
    assert queue_of("console.deployments.tasks.stop_deployment") == UPKEEP_QUEUE  # never behind a download
    assert queue_of("console.deployments.tasks.launch_deployment") == LONG_QUEUE
    # a tuning (long) waits for each value's recreate: in the long queue, tunings holding every long process would
    # wait for ever
    assert queue_of("console.deployments.tasks.recreate_deployment") == UPKEEP_QUEUE


def queues_taken(argv: list[str]) -> tuple[str, str]:
    """A worker command's ``-Q`` and its node name (``-n``, Celery's celery@%h without one)."""
    named = dict(itertools.pairwise(argv))
    return named["-Q"], named.get("-n", "celery@%h")


def test_make_up_and_compose_start_a_worker_for_each_queue_with_names_of_their_own() -> None:
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    composed = {name: queues_taken(services[name]["command"]) for name in ("worker", "worker-long")}
    assert composed == {"worker": (UPKEEP_QUEUE, "celery@%h"), "worker-long": (LONG_QUEUE, "long@%h")}
    assert services["worker-long"]["healthcheck"]["test"][-1] == "worker-long"
    assert services["worker-long"]["volumes"] == services["worker"]["volumes"]  # the Docker socket, the weights
    up = (ROOT / "scripts" / "up.sh").read_text()
    started = dict(re.findall(r"^start (worker\S*) .* worker (-Q \S+(?: -n \S+)?) ", up, re.M))
    assert started == {"worker": f"-Q {UPKEEP_QUEUE}", "worker-long": f"-Q {LONG_QUEUE} -n long@%h"}
    assert "stop worker-long" in (ROOT / "scripts" / "down.sh").read_text()


def in_child(env: dict[str, str], log: Path, code: str) -> None:
    """Run ``code`` after django.setup() in a child process of the workers' instance (its Celery app sends to
    their queues), to its end."""
    proc = Proc([sys.executable, "-c", f"import django; django.setup(); {code}"], env, log)
    assert proc.proc.wait(60) == 0, proc.output()[-3000:]


def states(ids: list[int]) -> list[str]:
    return list(Deployment.objects.filter(pk__in=ids).order_by("pk").values_list("state", flat=True))


@pytest.mark.process
@pytest.mark.django_db(transaction=True)  # the workers read the rows this test writes
def test_a_stop_is_taken_while_held_downloads_fill_the_long_worker_s_pool(
    live_env: dict[str, str], tmp_path: Path
) -> None:
    source = model()
    ids = [deployment(source, f"tiny-{n}") for n in range(LONG_POOL + 1)]
    with standin_hub(REPO, COMMIT, files()) as hub:
        hub.hold_after["model.safetensors"] = HOLD_AT  # every transfer waits mid-file until released
        env = {**launch_env(live_env, hub, tmp_path), "HEARTH_INSTANCE": f"queues-{uuid.uuid4().hex[:8]}"}
        workers = Workers(env, tmp_path)
        try:
            sends = "; ".join(f"dispatch.send(dispatch.LAUNCH, {pk})" for pk in ids)
            in_child(env, tmp_path / "launch.log", f"from console.deployments import dispatch; {sends}")
            deadline = time.monotonic() + 90
            while states(ids).count("pulling") < LONG_POOL:  # each of the long pool's processes holds a download
                assert time.monotonic() < deadline, (states(ids), workers.output()[-4000:])
                time.sleep(0.3)
            time.sleep(2)  # a launch beyond the pool would have begun by now
            assert sorted(states(ids)) == ["pending", "pulling", "pulling"], workers.output()[-4000:]
            waiting = states(ids).index("pending")
            with override_settings(HEARTH_INSTANCE=env["HEARTH_INSTANCE"]):  # the workers' Redis keys
                found = celery_heartbeats.read()
            assert found.long_waiting == 1  # the third launch, in Redis: no worker took it ahead of a free process
            said = {c.kind: c.words for c in caveats(Deployment.objects.get(pk=ids[waiting]), found)}
            assert said == {
                "queued": "The long-task worker is busy: 1 task waits in its queue for a free process (a launch, a"
                " batch run or a capacity check holds one while it runs). This launch starts when its turn comes."
            }
            pulling = next(n for n, state in enumerate(states(ids)) if state == "pulling")
            stops = "; ".join(f"admin_actions.stop(Deployment.objects.get(pk={ids[n]}))" for n in (pulling, waiting))
            imports = "from console.deployments import admin_actions; from console.deployments.models import Deployment"
            in_child(env, tmp_path / "stop.log", f"{imports}; {stops}")
            deadline = time.monotonic() + 60
            while [states(ids)[n] for n in (pulling, waiting)] != ["stopped", "stopped"]:
                assert time.monotonic() < deadline, (states(ids), workers.output()[-4000:])
                time.sleep(0.3)
            assert not hub.release.is_set() and states(ids).count("pulling") == LONG_POOL - 1  # still held
        finally:
            hub.release.set()
            workers.stop()
