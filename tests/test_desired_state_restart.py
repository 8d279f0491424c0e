"""What was wanted survives a restart (issue 28), without processes: ``make down``'s stop of every engine keeps each
deployment's desired state (console.deployments.stopping), the worker's reconcile launches again the ones wanted
serving and leaves the ones an admin stopped (console.deployments.restoring), an admin's stop of one waiting to come
back keeps it down, a request for one is held for its launch (the gateway's route table, the wake task), an asleep
one whose engine is gone becomes stopped to save, and the migration that keeps earlier stopped rows stopped. The
real make down / make up is tests/test_make_up_comes_back.py."""

from collections.abc import Iterator

import pytest
from django.apps.registry import Apps
from django.test import Client
from django.utils import timezone

from console.audit.models import AuditEntry
from console.catalog.models import ModelSource
from console.deployments import admin_actions, room_actions, sleeping, wakeups
from console.deployments.models import Deployment, DeploymentState, DesiredState, Replica
from console.deployments.restoring import ASLEEP_GONE, NOT_YET, asleep_engines_gone, relaunch_wanted
from console.deployments.stopping import stop_everything
from console.errors import ConsoleError
from gateway.snapshot import load_snapshot
from tests.migrating import migrate, schema_at
from tests.simworld import ensure_model

pytestmark = pytest.mark.django_db
S = DeploymentState
JSON = "application/json"


def deployment(name: str, state: str, desired: str, engine: str = "simulator") -> Deployment:
    """A simulator deployment of llama-8b planned on the simulated box, put in ``state`` wanting ``desired``."""
    ensure_model()
    dep = admin_actions.create_deployment(
        name=name, model=ModelSource.objects.get(name="llama-8b"), engine=engine, max_model_len=8192
    )
    Deployment.objects.filter(pk=dep.pk).update(state=state, desired=desired, state_reason="")
    dep.refresh_from_db()
    return dep


def with_engine(dep: Deployment) -> Replica:
    """A replica row whose engine is recorded running (no process: the runtime finds none under that name)."""
    return Replica.objects.create(
        deployment=dep,
        runtime="process",
        runtime_name=f"hearth-test-restart-{dep.pk}",
        host="127.0.0.1",
        port=1,
        running=True,
        ready_at=timezone.now(),
    )


def test_make_down_keeps_what_each_deployment_is_wanted_to_be() -> None:
    serving = deployment("serving", S.READY, DesiredState.SERVING)
    loading = deployment("loading", S.LOADING, DesiredState.SERVING)
    asleep = deployment("asleep", S.ASLEEP, DesiredState.ASLEEP)
    saving = deployment("saving", S.STOPPING, DesiredState.STOPPED_IDLE)
    stopping = deployment("stopping", S.STOPPING, DesiredState.STOPPED)
    for dep in (serving, loading, asleep, saving, stopping):
        with_engine(dep)
    stop_everything("make down")
    rows = {d.name: (d.state, d.desired, d.state_reason) for d in Deployment.objects.all()}
    back = "Stopped with the appliance (make down); the worker launches it again when it is back up."
    aside = "Stopped with the appliance (make down), as it was put aside; the next request launches it again."
    assert rows == {
        "serving": ("stopped", "serving", back),
        "loading": ("stopped", "serving", back),
        "asleep": ("stopped", "stopped_idle", aside),
        "saving": ("stopped", "stopped_idle", aside),
        "stopping": ("stopped", "stopped", "Stopped by the admin."),
    }
    assert not Replica.objects.filter(stopped_at__isnull=True).exists()  # every engine ended
    assert [d.name for d in Deployment.objects.order_by("pk") if d.relaunch_due] == ["serving", "loading"]


def test_reconcile_launches_again_only_what_is_wanted_serving() -> None:
    back = deployment("back", S.STOPPED, DesiredState.SERVING)
    deployment("admin-stopped", S.STOPPED, DesiredState.STOPPED)
    deployment("saved", S.STOPPED, DesiredState.STOPPED_IDLE)
    deployment("broken", S.FAILED, DesiredState.SERVING)  # a failure waits for an admin: no launch loop
    assert relaunch_wanted() == ["back"]
    rows = {d.name: (d.state, d.desired) for d in Deployment.objects.all()}
    assert rows == {
        "back": ("pending", "serving"),
        "admin-stopped": ("stopped", "stopped"),
        "saved": ("stopped", "stopped_idle"),
        "broken": ("failed", "serving"),
    }
    entry = AuditEntry.objects.get(action="deployment.launch", target_id=str(back.pk))
    assert entry.changes == {
        "state": ["stopped", "pending"],
        "reason": "Wanted serving when the appliance went down; launched again by the worker.",
    }
    assert relaunch_wanted() == []  # launched once: the next reconcile finds nothing to do


def test_one_that_cannot_be_launched_yet_says_why_and_waits_for_the_next_reconcile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dep = deployment("no-room", S.STOPPED, DesiredState.SERVING)

    def refuse(deployment: Deployment, make_room: bool = False, why: str = "") -> None:
        raise ConsoleError("no-room does not fit the free GPUs.")

    monkeypatch.setattr("console.deployments.restoring.launch", refuse)
    assert relaunch_wanted() == []
    dep.refresh_from_db()
    assert (dep.state, dep.desired, dep.state_reason) == (
        "stopped",
        "serving",
        NOT_YET + "no-room does not fit the free GPUs.",
    )
    monkeypatch.undo()
    assert relaunch_wanted() == ["no-room"]


def test_an_admins_stop_keeps_one_waiting_to_come_back_down(admin: Client) -> None:
    dep = deployment("keep-down", S.STOPPED, DesiredState.SERVING)
    assert 'data-action="keep-stopped"' in admin.get(f"/deployments/{dep.pk}/").content.decode()
    resp = admin.post(f"/api/deployments/{dep.pk}/stop", content_type=JSON)
    assert resp.status_code == 202, resp.content
    dep.refresh_from_db()
    assert (dep.state, dep.desired, dep.state_reason) == ("stopped", "stopped", "Stopped by the admin.")
    assert AuditEntry.objects.get(action="deployment.stop").changes == {"desired": ["serving", "stopped"]}
    assert relaunch_wanted() == []
    assert "keep-down" not in load_snapshot().asleep  # a request is refused, not held
    again = admin.post(f"/api/deployments/{dep.pk}/stop", content_type=JSON)
    assert again.status_code == 400 and "nothing to stop" in again.json()["detail"]
    assert 'data-action="keep-stopped"' not in admin.get(f"/deployments/{dep.pk}/").content.decode()


def test_an_admins_stop_keeps_one_stopped_to_save_down_while_a_request_is_held_for_it(
    admin: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial's admin could not keep a stopped-to-save model down while a request waited for it: Stop answered
    "nothing to stop", and the page offered only Wake, Launch and Delete."""
    dep = deployment("saver", S.STOPPED, DesiredState.STOPPED_IDLE)
    assert "saver" in load_snapshot().asleep  # a request for it is held for its launch
    assert 'data-action="keep-stopped"' in admin.get(f"/deployments/{dep.pk}/").content.decode()
    resp = admin.post(f"/api/deployments/{dep.pk}/stop", content_type=JSON)
    assert resp.status_code == 202, resp.content
    dep.refresh_from_db()
    assert (dep.state, dep.desired, dep.state_reason) == ("stopped", "stopped", "Stopped by the admin.")
    assert AuditEntry.objects.get(action="deployment.stop").changes == {"desired": ["stopped_idle", "stopped"]}
    assert "saver" not in load_snapshot().asleep  # the held request is refused, not launched for
    launched: list[str] = []
    monkeypatch.setattr("console.deployments.sleeping.launch", lambda d, *a, **k: launched.append(d.name))
    dep.desired = DesiredState.STOPPED_IDLE  # a wake task that read it before the stop: it launches nothing
    sleeping._relaunch(dep, "A request came for it.", audited=True)
    assert launched == [] and Deployment.objects.get(pk=dep.pk).wake_started_at is None


def test_a_stopping_deployment_says_so_and_offers_no_second_stop(admin: Client) -> None:
    """A trial's deployment page offered Stop while the deployment was stopping (its drain under way)."""
    dep = deployment("draining", S.STOPPING, DesiredState.STOPPED)
    page = admin.get(f"/deployments/{dep.pk}/").content.decode()
    assert 'data-field="stopping">Stopping: requests in flight get up to' in page
    assert "<button>Stop</button>" not in page
    ready = deployment("ready", S.READY, DesiredState.SERVING)
    assert "<button>Stop</button>" in admin.get(f"/deployments/{ready.pk}/").content.decode()


def test_keep_stopped_on_the_page_keeps_it_down(admin: Client) -> None:
    dep = deployment("page", S.STOPPED, DesiredState.SERVING)
    assert admin.post(f"/deployments/{dep.pk}/stop/").status_code == 302
    dep.refresh_from_db()
    assert (dep.state, dep.desired, dep.relaunch_due) == ("stopped", "stopped", False)


def test_a_request_for_one_coming_back_is_held_and_its_wake_launches_it() -> None:
    dep = deployment("coming", S.STOPPED, DesiredState.SERVING)
    deployment("down", S.STOPPED, DesiredState.STOPPED)
    snap = load_snapshot()
    assert set(snap.asleep) == {"coming"} and snap.asleep["coming"].deployment_id == dep.pk
    assert snap.states == {"coming": "stopped", "down": "stopped"}
    room_actions.wake(dep.pk, "A request came for it.")  # the task gateway.holding's ask sends
    dep.refresh_from_db()
    assert (dep.state, dep.desired) == ("pending", "serving") and dep.wake_started_at is not None
    wake = AuditEntry.objects.get(action="deployment.wake")
    assert wake.changes == {"reason": "A request came for it.", "from": "stopped"}
    assert not wakeups.wake_asked(dep.pk)  # the ask is released: the next one may ask again
    assert "coming" in load_snapshot().asleep  # held on while it launches (a wake under way)


def test_an_asleep_deployment_whose_engine_is_gone_becomes_stopped_to_save() -> None:
    gone = deployment("gone", S.ASLEEP, DesiredState.ASLEEP)
    replica = with_engine(gone)
    assert asleep_engines_gone() == ["gone"]
    gone.refresh_from_db()
    assert (gone.state, gone.desired, gone.state_reason) == ("stopped", "stopped_idle", ASLEEP_GONE)
    replica.refresh_from_db()
    assert replica.stopped_at is not None and not replica.running
    assert "gone" in load_snapshot().asleep  # the next request is held and launches it
    assert asleep_engines_gone() == []


BEFORE = [("deployments", "0009_idle_policy")]
AFTER = [("deployments", "0010_stopped_stays_stopped")]


@pytest.fixture
def before() -> Iterator[Apps]:
    with schema_at(BEFORE) as apps:
        yield apps


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_earlier_stopped_rows_stopped_and_every_row(before: Apps) -> None:
    model = before.get_model("deployments", "Deployment")
    rows = {
        "old-make-down": ("stopped", "serving"),  # what make down left before: only an admin launched it again
        "admin-stopped": ("stopped", "stopped"),
        "saved": ("stopped", "stopped_idle"),
        "up": ("ready", "serving"),
        "broken": ("failed", "serving"),
    }
    for name, (state, desired) in rows.items():
        model.objects.create(
            name=name,
            served_model_name=name,
            engine="simulator",
            max_model_len=0,
            kv_space_gib=1,
            plan={},
            state=state,
            desired=desired,
            state_reason=f"{name} as it was",
        )
    after = migrate(AFTER).get_model("deployments", "Deployment")
    migrated = {d.name: (d.state, d.desired, d.state_reason) for d in after.objects.all()}
    assert migrated == {
        "old-make-down": ("stopped", "stopped", "old-make-down as it was"),
        "admin-stopped": ("stopped", "stopped", "admin-stopped as it was"),
        "saved": ("stopped", "stopped_idle", "saved as it was"),
        "up": ("ready", "serving", "up as it was"),
        "broken": ("failed", "serving", "broken as it was"),
    }
    back = migrate(BEFORE).get_model("deployments", "Deployment")
    assert {d.name: (d.state, d.state_reason) for d in back.objects.all()} == {
        name: (state, reason) for name, (state, _, reason) in migrated.items()
    }
