"""The deployment actions' bodies are read as strictly as every other (docs/api.md): launch and wake take
``make_room`` in the body as create and plan do (or in the query, as before); stop and sleep take no field; a typo
or a wrong type is a 400 naming it, where a trial's ``{"make_room": true, "typo": 1}`` to /wake was taken silently
with make_room false. No body, ``{}`` or an empty form are the same as none."""

import pytest
from django.test import Client

from console.deployments import admin_actions, idle_actions
from tests.test_idle_settings import create

pytestmark = pytest.mark.django_db
JSON = "application/json"


def test_action_bodies_are_read_strictly_and_make_room_may_be_in_the_body(
    admin: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, dep = create(admin, idle_policy="sleep", idle_minutes=5, sleep_level=2)
    assert status == 201, dep
    consent: list[tuple[str, bool]] = []
    monkeypatch.setattr(admin_actions, "launch", lambda d, make_room=False: consent.append(("launch", make_room)))
    monkeypatch.setattr(idle_actions, "wake_by_hand", lambda d, make_room=False: consent.append(("wake", make_room)))
    for action in ("launch", "wake"):
        url = f"/api/deployments/{dep['id']}/{action}"
        assert admin.post(url, '{"make_room": true}', content_type=JSON).status_code == 202
        assert admin.post(f"{url}?make_room=true").status_code == 202
        assert admin.post(url).status_code == 202 and admin.post(url, "{}", content_type=JSON).status_code == 202
        typo = admin.post(url, '{"make_room": true, "typo": 1}', content_type=JSON)
        assert (typo.status_code, typo.json()) == (400, {"detail": "typo: Extra inputs are not permitted"})
        one = admin.post(url, '{"make_room": 1}', content_type=JSON)
        assert one.status_code == 400 and one.json()["detail"].startswith("make_room: Input should be a valid boolean")
    assert consent == [(a, m) for a in ("launch", "wake") for m in (True, True, False, False)]
    for action in ("stop", "sleep"):
        level = admin.post(f"/api/deployments/{dep['id']}/{action}", '{"level": 9}', content_type=JSON)
        assert (level.status_code, level.json()) == (400, {"detail": "level: Extra inputs are not permitted"})
