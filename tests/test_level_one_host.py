"""One rule for a level-1 sleep whose copy of the weights the host RAM cannot hold now, on every path that puts a
deployment to sleep: the room stops it instead (tests/test_room.py), the idle policy stops it instead, and an admin's
Sleep is refused with why (a trial's 70B on a 23 GiB host slept at level 1 by its idle policy and by an admin's
Sleep, though its page said it would be stopped instead). A simulated box judges nothing here: its engines copy
nothing to this host (tests/test_sleep_live.py sleeps a simulated 8B at level 1 on a 24 GiB test machine)."""

import secrets
from collections.abc import Iterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from console.deployments import idling, room_making
from console.deployments.models import Deployment, DeploymentState
from tests.test_idle_settings import create

pytestmark = pytest.mark.django_db
RAM = 64 * 1024**3


@pytest.fixture(autouse=True)
def own_instance(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(room_making, "host_available_bytes", lambda: RAM)  # the host's MemAvailable, as read
    real = SimpleNamespace(simulated=False)  # real GPUs: a level-1 copy lands in this host's RAM
    monkeypatch.setattr(room_making, "current_inventory", lambda: real)
    with override_settings(HEARTH_INSTANCE=f"level-one-{secrets.token_hex(4)}"):
        yield


def idle(admin: Client, weights_bytes: int, level: int = 1) -> Deployment:
    """A ready deployment of that size, sleeping at ``level`` after a minute idle, up an hour with no request."""
    status, made = create(admin, idle_policy="sleep", idle_minutes=1, sleep_level=level)
    assert status == 201, made
    dep = Deployment.objects.get(pk=made["id"])
    hour_ago = timezone.now() - timedelta(hours=1)
    Deployment.objects.filter(pk=dep.pk).update(
        plan={**dep.plan, "weights_bytes": weights_bytes}, state=DeploymentState.READY, state_since=hour_ago
    )
    dep.refresh_from_db()
    return dep


def claims(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """What reconcile's idle policy claims, (sleep or stop, reason), the claims themselves not made."""
    said: list[tuple[str, str]] = []
    monkeypatch.setattr(idling, "can_sleep_now", lambda dep: True)  # its engine was started able to sleep
    monkeypatch.setattr(idling, "claim_sleep", lambda dep, reason: said.append(("sleep", reason)))
    monkeypatch.setattr(idling, "claim_stop_to_save", lambda dep, reason: said.append(("stop", reason)))
    return said


def test_the_idle_policy_stops_a_level_one_sleep_the_host_cannot_hold(admin: Client, monkeypatch: Any) -> None:
    said = claims(monkeypatch)
    big = idle(admin, 131 * 1024**3)
    idling.apply_idle_policies()
    assert said == [
        (
            "stop",
            "Idle for 1 h 0 min (policy: sleep after 1 min). A level-1 sleep would copy 131.0 GiB of weights to "
            "host RAM, 64.0 GiB is free: stopped instead.",
        )
    ]
    Deployment.objects.filter(pk=big.pk).update(sleep_level=2)  # level 2 keeps no copy
    said.clear()
    idling.apply_idle_policies()
    assert [what for what, _ in said] == ["sleep"]


def test_a_level_one_sleep_the_host_holds_is_taken(admin: Client, monkeypatch: Any) -> None:
    said = claims(monkeypatch)
    idle(admin, 16 * 1024**3)
    idling.apply_idle_policies()
    assert [what for what, _ in said] == ["sleep"]


def test_an_admins_sleep_is_refused_with_why(admin: Client) -> None:
    dep = idle(admin, 131 * 1024**3)
    refused = admin.post(f"/api/deployments/{dep.pk}/sleep")
    assert refused.status_code == 400
    assert refused.json()["detail"] == (
        "d cannot sleep at level 1 now: a level-1 sleep would copy 131.0 GiB of weights to host RAM, 64.0 GiB is "
        "free. Set its sleep level to 2 (weights dropped, reloaded on wake), or stop it."
    )
    dep.refresh_from_db()
    assert dep.state == DeploymentState.READY


def test_a_simulated_box_sleeps_at_level_one_whatever_this_hosts_ram(admin: Client, monkeypatch: Any) -> None:
    monkeypatch.setattr(room_making, "current_inventory", lambda: SimpleNamespace(simulated=True))
    said = claims(monkeypatch)
    idle(admin, 131 * 1024**3)
    idling.apply_idle_policies()
    assert [what for what, _ in said] == ["sleep"]
