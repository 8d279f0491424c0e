"""Changing a deployment's replica count through the change form and the API: the preview (the GPUs each replica
takes, whether it fits, no downtime when only the count changes on a ready deployment), bad counts refused with a
form error and nothing changed, and an added replica that fails to load set back (console.deployments.scaling);
what reconcile carries on when a worker died or a task was lost. The live 1 → 2 → 1 with real engines is
tests/test_replica_scaling_live.py."""

import re
import socket
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from appliance.celery_heartbeats import Liveness
from console.catalog.models import ModelSource
from console.deployments import admin_actions, dispatch, reconciling
from console.deployments.lifecycle import restart_port
from console.deployments.models import Deployment, Replica
from console.deployments.scaling import added_replica_failed, resume_stale_scales
from tests.simworld import ensure_model

pytestmark = pytest.mark.django_db


def _running(name: str, gpus: list[int], tp: int = 1) -> Deployment:
    """A ready simulator deployment on ``gpus`` with one replica serving per TP GPUs (rows only, no engine)."""
    ensure_model()
    model = ModelSource.objects.get(name="llama-8b")
    dep = admin_actions.create_deployment(
        name=name, model=model, engine="simulator", max_model_len=8192, tensor_parallel_size=tp
    )
    started = timezone.now() - timedelta(minutes=5)
    Deployment.objects.filter(pk=dep.pk).update(
        state="ready", plan={**dep.plan, "gpu_indices": gpus}, engine_image="pinned", replica_count=len(gpus) // tp
    )
    for _ in range(len(gpus) // tp):
        Replica.objects.create(
            deployment=dep,
            runtime="process",
            host="h",
            port=1,
            engine_api_key="k",
            running=True,
            started_at=started,
            ready_at=started + timedelta(seconds=20),
        )
    dep.refresh_from_db()
    return dep


def _form(admin: Client, dep: Deployment) -> dict[str, str]:
    """The change form's values as the page starts them."""
    page = admin.get(f"/deployments/{dep.pk}/change/").content.decode()
    values = dict(re.findall(r'name="([a-z_]+)" value="([^"]*)"', page))
    return values | {"kv_cache_dtype": "auto", "idle_policy": "stay", "sleep_level": "1", "fit_max_tokens": "on"}


def test_adding_a_replica_to_a_ready_deployment_keeps_it_serving_on_its_gpus(admin: Client) -> None:
    _running("other", [0])
    dep = _running("live", [2])
    form = _form(admin, dep) | {"replica_count": "2"}
    assert _form(admin, dep)["replica_count"] == "1"

    page = admin.post(f"/deployments/{dep.pk}/change/", form).content.decode()
    assert 'data-field="scale"' in page and 'data-field="recreate"' not in page
    assert 'data-field="downtime">none<' in page and "Confirm: 2 replicas" in page
    assert "GPUs each replica takes: replica 1 GPU 2; replica 2 GPU 1." in page  # the serving one keeps GPU 2
    assert "the replica serving keeps serving and its GPUs; the added one starts beside it and joins" in page
    dep.refresh_from_db()
    assert dep.replica_count == 1  # a preview changes nothing

    assert admin.post(f"/deployments/{dep.pk}/change/", form | {"confirm": ""}).status_code == 302
    dep.refresh_from_db()
    assert (dep.state, dep.replica_count, dep.plan["gpu_indices"], dep.engine_image) == ("ready", 2, [2, 1], "pinned")
    assert dep.state_reason == "Serving; from 1 to 2 replicas: starting 1."


def test_removing_a_replica_drains_it_without_downtime(admin: Client) -> None:
    dep = _running("pair", [0, 1])
    form = _form(admin, dep) | {"replica_count": "1"}
    page = admin.post(f"/deployments/{dep.pk}/change/", form).content.decode()
    assert "route, its requests in flight end (up to 120 s), then it stops; the other keeps serving." in page
    assert 'data-field="downtime">none<' in page
    admin.post(f"/deployments/{dep.pk}/change/", form | {"confirm": ""})
    dep.refresh_from_db()
    assert (dep.state, dep.replica_count, dep.plan["gpu_indices"]) == ("ready", 1, [0])


def test_the_count_with_other_settings_is_a_recreate_with_its_downtime(admin: Client) -> None:
    dep = _running("live", [0])
    form = _form(admin, dep) | {"replica_count": "2", "max_model_len": "4096"}
    page = admin.post(f"/deployments/{dep.pk}/change/", form).content.decode()
    assert 'data-field="recreate"' in page and 'data-field="scale"' not in page and "about 30 s" in page
    admin.post(f"/deployments/{dep.pk}/change/", form | {"confirm": ""})
    dep.refresh_from_db()
    assert (dep.state, dep.replica_count, dep.max_model_len, dep.engine_image) == ("stopping", 2, 4096, "")


def test_a_stopped_deployment_just_takes_the_new_count(admin: Client) -> None:
    dep = _running("idle", [0])
    Deployment.objects.filter(pk=dep.pk).update(state="stopped")
    form = _form(admin, dep) | {"replica_count": "3"}
    page = admin.post(f"/deployments/{dep.pk}/change/", form).content.decode()
    assert 'data-field="scale"' not in page and "Confirm: save these settings" in page
    admin.post(f"/deployments/{dep.pk}/change/", form | {"confirm": ""})
    dep.refresh_from_db()
    assert (dep.state, dep.replica_count, len(dep.plan["gpu_indices"])) == ("stopped", 3, 3)


@pytest.mark.parametrize(
    ("count", "error"),
    [
        ("0", "Ensure this value is greater than or equal to 1."),
        ("-1", "Ensure this value is greater than or equal to 1."),
        ("two", "Enter a whole number."),
        ("9", "Ensure this value is less than or equal to 8."),
        ("3", "3 replicas at tensor parallel 4 need 12 GPUs; 8 are free on this box."),
    ],
)
def test_a_bad_count_is_a_form_error_and_changes_nothing(admin: Client, count: str, error: str) -> None:
    dep = _running("big", [0, 1, 2, 3], tp=4)
    before = Deployment.objects.get(pk=dep.pk)
    for press in ({}, {"confirm": ""}):
        resp = admin.post(f"/deployments/{dep.pk}/change/", _form(admin, dep) | {"replica_count": count} | press)
        page = resp.content.decode()
        assert resp.status_code == 200 and error in page
        assert re.search(r'<ul class="errorlist"[^>]*>\s*<li>' + re.escape(error), page), page
        assert "Confirm:" not in page
    after = Deployment.objects.get(pk=dep.pk)
    assert (after.replica_count, after.plan, after.state) == (before.replica_count, before.plan, before.state)
    assert dep.replicas.count() == 1


def test_the_api_previews_and_applies_a_count(admin: Client) -> None:
    dep = _running("live", [0])
    url = f"/api/deployments/{dep.pk}/change"
    preview = admin.post(url, {"replica_count": 2}, content_type="application/json").json()
    assert (preview["scale"], preview["recreate"], preview["downtime_seconds"]) == ([1, 2], False, 0.0)
    assert preview["plan"]["gpu_indices"] == [0, 1]
    refused = admin.post(url, {"replica_count": 0, "confirm": True}, content_type="application/json")
    assert refused.status_code == 400 and "1 to 8 replicas" in refused.json()["detail"]
    done = admin.post(url, {"replica_count": 2, "confirm": True}, content_type="application/json")
    assert done.status_code == 202 and done.json()["replica_count"] == 2 and done.json()["state"] == "ready"


def test_an_added_replica_that_fails_to_load_is_ended_alone_and_the_count_goes_back() -> None:
    dep = _running("live", [0, 1])
    added = Replica.objects.filter(deployment=dep).latest("pk")
    Replica.objects.filter(pk=added.pk).update(ready_at=None, running=False, stopped_at=timezone.now())
    added.refresh_from_db()
    assert added_replica_failed(added, "The engine exited while loading with code 1.")
    dep.refresh_from_db()
    assert (dep.state, dep.replica_count, dep.plan["gpu_indices"]) == ("ready", 1, [0])
    assert dep.state_reason.startswith("Serving on 1 replica; the added replica")

    first = Replica.objects.filter(deployment=dep).earliest("pk")
    assert not added_replica_failed(first, "a first launch's failure")  # none serves besides it: the launch fails


def test_a_count_changed_again_before_the_last_change_settled_is_refused(admin: Client) -> None:
    dep = _running("live", [0, 1])
    Deployment.objects.filter(pk=dep.pk).update(replica_count=1)  # 2 → 1 under way: the second still drains
    dep.refresh_from_db()
    page = admin.post(f"/deployments/{dep.pk}/change/", _form(admin, dep) | {"replica_count": "3"}).content.decode()
    assert "still changing its replica count (2 replicas live for 1 wanted)" in page
    dep.refresh_from_db()
    assert dep.replica_count == 1


def test_reconcile_resumes_a_change_of_count_whose_worker_died(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, int]] = []
    monkeypatch.setattr(dispatch, "send", lambda name, pk, *args, **kw: sent.append((name, pk)))
    settled, lost = _running("settled", [0]), _running("lost", [1])
    silent = timezone.now() - timedelta(minutes=5)
    Deployment.objects.filter(pk__in=[settled.pk, lost.pk]).update(updated_at=silent)
    Deployment.objects.filter(pk=lost.pk).update(replica_count=2)  # the worker died before the second replica's row
    resume_stale_scales()
    assert sent == [(dispatch.SCALE, lost.pk)]
    resume_stale_scales()  # claimed: not sent twice while the resumed scale runs
    assert sent == [(dispatch.SCALE, lost.pk)]


class _RuntimeAddingAReplica:
    """A runtime whose listing comes as a replica is added: its row (with the engine's name) is saved and its engine
    started while reconcile looks for orphans. Besides it runs one engine no replica owns."""

    def __init__(self, dep: Deployment) -> None:
        self.dep, self.stopped = dep, []

    def names(self) -> set[str]:
        Replica.objects.create(deployment=self.dep, runtime="process", host="h", port=2, runtime_name="hearth-x-new")
        return {"hearth-x-new", "hearth-x-orphan"}

    def stop(self, name: str) -> None:
        self.stopped.append(name)


def test_reconcile_never_stops_a_replica_added_while_it_looks_for_orphans(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = _RuntimeAddingAReplica(_running("live", [0]))
    monkeypatch.setattr(reconciling, "get_runtime", lambda name=None: runtime)
    reconciling._remove_orphans()
    assert runtime.stopped == ["hearth-x-orphan"]


def test_a_local_engine_restarts_on_a_port_chosen_again_and_a_container_keeps_its_own() -> None:
    """While a crashed local engine waits out its backoff its port is free for any process to take."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        local = Replica(runtime="process", host="127.0.0.1", port=port)
        restart_port(local)
        assert local.port != port
        with socket.socket() as again:
            again.bind(("127.0.0.1", local.port))  # free
    container = Replica(runtime="docker", host="hearth-replica-1", port=8000)
    restart_port(container)
    assert container.port == 8000


def test_reconcile_sends_again_a_launch_whose_task_was_lost_and_not_one_still_queued(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A launch's task lost (a Redis restarted empty, a worker killed as it took it) left it pending for ever."""
    sent: list[tuple[str, int]] = []
    monkeypatch.setattr(dispatch, "send", lambda name, pk, *args, **kw: sent.append((name, pk)))
    waiting = [1]
    monkeypatch.setattr(
        reconciling.celery_heartbeats, "read", lambda: Liveness(0.0, None, None, long_waiting=waiting[0])
    )
    lost, fresh = _running("lost", [0]), _running("fresh", [1])
    Deployment.objects.filter(pk__in=[lost.pk, fresh.pk]).update(state="pending", state_reason="Waiting for a worker.")
    silent = timezone.now() - timedelta(seconds=reconciling.LOST_AFTER * settings.HEARTH_STALE_AFTER + 1)
    Deployment.objects.filter(pk=lost.pk).update(updated_at=silent)
    reconciling._resend_lost_launches()
    assert sent == []  # a task waits in the long queue: it may be this launch's
    waiting[0] = 0
    reconciling._resend_lost_launches()
    assert sent == [(dispatch.LAUNCH, lost.pk)]
    assert Deployment.objects.get(pk=lost.pk).state_reason == reconciling.LOST_LAUNCH
    reconciling._resend_lost_launches()  # claimed: not sent again while the launch sent runs
    assert sent == [(dispatch.LAUNCH, lost.pk)]


def test_reconcile_sends_again_a_stop_whose_task_was_lost_as_its_desired_state_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stop's task lost left the deployment stopping for ever, its engines running."""
    sent: list[tuple[str, int, tuple[object, ...]]] = []
    monkeypatch.setattr(dispatch, "send", lambda name, pk, *args, **kw: sent.append((name, pk, args)))
    by_admin, to_save, recreate, fresh = (_running(n, [i]) for i, n in enumerate(["admin", "save", "change", "fresh"]))
    Deployment.objects.filter(pk__in=[by_admin.pk, to_save.pk, recreate.pk, fresh.pk]).update(state="stopping")
    Deployment.objects.filter(pk=by_admin.pk).update(desired="stopped")
    Deployment.objects.filter(pk=to_save.pk).update(desired="stopped_idle")
    Deployment.objects.filter(pk=recreate.pk).update(desired="serving")
    lost = settings.HEARTH_DRAIN_SECONDS + reconciling.LOST_AFTER * settings.HEARTH_STALE_AFTER
    silent = timezone.now() - timedelta(seconds=lost + 1)
    Deployment.objects.filter(pk__in=[by_admin.pk, to_save.pk, recreate.pk]).update(updated_at=silent)
    Deployment.objects.filter(pk=fresh.pk).update(updated_at=timezone.now() - timedelta(seconds=lost - 5))
    reconciling._resend_lost_stops()
    assert sorted(sent) == sorted(
        [
            (dispatch.STOP, by_admin.pk, ()),
            (dispatch.STOP_IDLE, to_save.pk, (reconciling.LOST_STOP_REASON,)),
            (dispatch.RECREATE, recreate.pk, ()),
        ]
    )
    assert Deployment.objects.get(pk=by_admin.pk).state_reason == reconciling.LOST_STOP
    reconciling._resend_lost_stops()  # claimed: not sent again while the stops sent run
    assert len(sent) == 3
