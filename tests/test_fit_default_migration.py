"""Fitting max_tokens to the context left is on for a new deployment, whichever way it is made (the JSON API, the
console's form, the admin action), and off only when asked; deployments 0011 changes only the default: every
deployment made before keeps its setting, on or off, and back."""

from collections.abc import Iterator

import pytest
from django.apps.registry import Apps
from django.test import Client

from console.catalog.models import ModelSource
from console.deployments import admin_actions
from console.deployments.models import Deployment
from tests.migrating import migrate, schema_at
from tests.test_agent_support import hf_model

BEFORE = [("deployments", "0010_stopped_stays_stopped")]
AFTER = [("deployments", "0011_fit_max_tokens_on_by_default")]


@pytest.fixture
def before() -> Iterator[Apps]:
    with schema_at(BEFORE) as apps:
        yield apps


@pytest.mark.django_db(transaction=True)
def test_existing_deployments_keep_their_setting_and_new_ones_fit(before: Apps) -> None:
    old = before.get_model("deployments", "Deployment")
    fields = {"engine": "simulator", "max_model_len": 8192, "kv_space_gib": 0, "plan": {}, "state": "stopped"}
    old.objects.create(name="made-off", served_model_name="made-off", **fields)  # the default then: off
    old.objects.create(name="turned-on", served_model_name="turned-on", fit_max_tokens=True, **fields)
    after = migrate(AFTER).get_model("deployments", "Deployment")
    assert dict(after.objects.values_list("name", "fit_max_tokens")) == {"made-off": False, "turned-on": True}
    after.objects.create(name="new", served_model_name="new", **fields)
    assert after.objects.get(name="new").fit_max_tokens
    back = migrate(BEFORE).get_model("deployments", "Deployment")
    rows = dict(back.objects.values_list("name", "fit_max_tokens"))
    assert rows == {"made-off": False, "turned-on": True, "new": True}


@pytest.mark.django_db
def test_a_new_deployment_fits_unless_turned_off_by_every_way_of_making_one(admin: Client) -> None:
    model: ModelSource = hf_model("qwen", "qwen3-8b")
    made = admin_actions.create_deployment(name="action", model=model, engine="simulator", max_model_len=32768)
    assert made.fit_max_tokens and all(a["serves"] for a in made.plan["agents"])  # Claude Code fits in 32K fitted
    body = {"model": "qwen", "engine": "simulator", "max_model_len": 32768}
    on = admin.post("/api/deployments", {**body, "name": "api-on"}, content_type="application/json")
    off = admin.post(
        "/api/deployments", {**body, "name": "api-off", "fit_max_tokens": False}, content_type="application/json"
    )
    assert (on.status_code, off.status_code) == (201, 201), (on.content, off.content)
    assert (on.json()["fit_max_tokens"], off.json()["fit_max_tokens"]) == (True, False)
    plan = admin.post("/api/plan", body, content_type="application/json")
    assert plan.status_code == 200, plan.content
    assert all(a["serves"] for a in plan.json()["agents"])  # planned as it would be made: fitted
    page = admin.get("/deployments/").content.decode()
    box = next(line for line in page.splitlines() if 'name="fit_max_tokens"' in line)
    assert "checked" in box  # the form offers it on
    assert {d.name: d.fit_max_tokens for d in Deployment.objects.all()} == {
        "action": True,
        "api-on": True,
        "api-off": False,
    }
