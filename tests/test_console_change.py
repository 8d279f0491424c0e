"""Changing a deployment's settings from the console: preview first, Recreate while it runs."""

from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from console.catalog.models import ModelSource
from console.deployments import admin_actions
from console.deployments.models import Deployment, Replica
from tests.simworld import ensure_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def dep() -> Deployment:
    ensure_model()
    model = ModelSource.objects.get(name="llama-8b")
    return admin_actions.create_deployment(name="live", model=model, engine="simulator", max_model_len=8192)


def form(**changes: object) -> dict[str, object]:
    return {
        "max_model_len": 8192,
        "kv_space_gib": 1,
        "kv_cache_dtype": "auto",
        "gpu_memory_utilization": 0,
        "tensor_parallel_size": 0,
        "extra_args": "",
    } | changes


def test_a_running_deployment_previews_the_recreate_and_its_downtime_then_changes(
    admin: Client, dep: Deployment
) -> None:
    Deployment.objects.filter(pk=dep.pk).update(state="ready")
    started = timezone.now() - timedelta(minutes=5)
    Replica.objects.create(
        deployment=dep,
        runtime="process",
        host="h",
        port=1,
        engine_api_key="k",
        running=True,
        started_at=started,
        ready_at=started + timedelta(seconds=42),
    )
    page = admin.get(f"/deployments/{dep.pk}/change/").content.decode()
    assert 'value="8192"' in page

    new = form(max_model_len=4096, extra_args="--seed 3")
    page = admin.post(f"/deployments/{dep.pk}/change/", new).content.decode()
    assert 'data-field="recreate"' in page and "about 52 s" in page  # 10 s grace + 42 s to load last time
    dep.refresh_from_db()
    assert dep.max_model_len == 8192 and dep.state == "ready"  # a preview changes nothing

    resp = admin.post(f"/deployments/{dep.pk}/change/", new | {"confirm": ""})
    assert resp.status_code == 302
    dep.refresh_from_db()
    assert (dep.state, dep.max_model_len, dep.plan["max_model_len"], dep.extra_args) == (
        "stopping",
        4096,
        4096,
        ["--seed", "3"],
    )


def test_a_stopped_deployment_just_takes_the_new_settings(admin: Client, dep: Deployment) -> None:
    page = admin.post(f"/deployments/{dep.pk}/change/", form(max_model_len=2048)).content.decode()
    assert 'data-field="recreate"' not in page and "Confirm: save these settings" in page
    assert "Nothing is relaunched:</strong> live is not launched yet; its first launch takes them." in page
    admin.post(f"/deployments/{dep.pk}/change/", form(max_model_len=2048, confirm=""))
    dep.refresh_from_db()
    assert (dep.state, dep.max_model_len) == ("stopped", 2048)


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"extra_args": "--port 9"}, "Hearth sets these itself"),
        ({"extra_args": "--max-model-len 9"}, "set it in the deployment"),
        ({"max_model_len": 10_000_000}, ""),
    ],
)
def test_a_change_the_plan_refuses_is_explained_and_changes_nothing(
    admin: Client, dep: Deployment, changes: dict[str, object], error: str
) -> None:
    before = Deployment.objects.get(pk=dep.pk)
    resp = admin.post(f"/deployments/{dep.pk}/change/", form(**changes, confirm=""))
    assert resp.status_code == 200 and 'class="errorlist' in resp.content.decode()
    assert error in resp.content.decode()
    after = Deployment.objects.get(pk=dep.pk)
    assert (after.plan, after.extra_args, after.max_model_len) == (before.plan, before.extra_args, before.max_model_len)


def test_the_api_previews_and_applies_a_change(admin: Client, dep: Deployment) -> None:
    preview = admin.post(f"/api/deployments/{dep.pk}/change", {"max_model_len": 4096}, content_type="application/json")
    assert preview.status_code == 200
    assert preview.json()["recreate"] is False and preview.json()["plan"]["max_model_len"] == 4096
    done = admin.post(
        f"/api/deployments/{dep.pk}/change", {"max_model_len": 4096, "confirm": True}, content_type="application/json"
    )
    assert done.status_code == 202 and done.json()["plan"]["max_model_len"] == 4096


def test_a_change_through_the_api_keeps_what_it_leaves_out(admin: Client, dep: Deployment) -> None:
    Deployment.objects.filter(pk=dep.pk).update(extra_args=["--seed", "3"])
    body = {"max_num_seqs": 64, "confirm": True}
    assert admin.post(f"/api/deployments/{dep.pk}/change", body, content_type="application/json").status_code == 202
    dep.refresh_from_db()
    assert dep.extra_args == ["--seed", "3"] and dep.max_model_len == 8192 and dep.plan["max_num_seqs"] == 64


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"kv_space_gib": float("nan")}, "KV space must be above 0"),
        ({"kv_space_gib": -100}, "KV space must be above 0"),
        ({"extra_args": ["--enable-prefix-caching\u0000"]}, "printable"),
        ({"max_num_seqs": -1}, "max_num_seqs"),
        ({"extra_args": ["--x"] * 101}, "At most 100 extra engine flags"),
    ],
)
def test_bad_numbers_and_flags_are_refused_on_create_and_change(
    admin: Client, dep: Deployment, body: dict[str, object], error: str
) -> None:
    create = {"name": "other", "model": "llama-8b", "engine": "simulator"} | body
    resp = admin.post("/api/deployments", create, content_type="application/json")
    assert resp.status_code == 400 and error in resp.json()["detail"]
    resp = admin.post(f"/api/deployments/{dep.pk}/change", body | {"confirm": True}, content_type="application/json")
    assert resp.status_code == 400 and error in resp.json()["detail"]
    assert not Deployment.objects.filter(name="other").exists()


def test_a_launch_whose_gpus_were_taken_meanwhile_is_planned_again_on_free_ones(dep: Deployment) -> None:
    from console.deployments.changes import replan_on_free_gpus

    model = ModelSource.objects.get(name="llama-8b")
    other = admin_actions.create_deployment(name="second", model=model, engine="simulator", max_model_len=8192)
    assert dep.plan["gpu_indices"] == other.plan["gpu_indices"] == [0]  # both planned while neither ran
    Deployment.objects.filter(pk=dep.pk).update(state="ready")
    assert replan_on_free_gpus(other) == ""
    assert other.plan["gpu_indices"] == [1]
    assert other.plan["reasons"][0] == "Planned again at launch on GPU 1: GPU 0 (live) held."

    with override_settings(HEARTH_GPU_INVENTORY="sim:1xL40S-48GB"):
        Deployment.objects.filter(pk=other.pk).update(plan={**other.plan, "gpu_indices": [0]})
        other.refresh_from_db()
        refused = replan_on_free_gpus(other)
    assert refused.startswith("Its GPUs are held by other deployments: GPU 0 (live), and it does not fit")
    assert refused.endswith("Stop one of those first.")
