"""The console's JSON API on malformed or clashing input: a 400 whose detail names the field as the client wrote it,
says which deployment holds a taken name, and takes engine flags as the form does; nothing saved. A session request
without its CSRF token is told the header that passes the check. An action whose task cannot be queued (a launch, a
stop, a wake, a capacity check) is a 503 that changes nothing."""

from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings

from console.audit.models import AuditEntry
from console.capacity.models import CapacityRun
from console.catalog.models import ModelSource
from console.deployments.models import Deployment
from tests.test_console import smollm2  # noqa: F401 - the fixture
from tests.test_console_replicas import _running
from tests.test_modelconfig import checkpoint

pytestmark = pytest.mark.django_db


def test_a_model_added_without_a_name_is_named_after_its_folder(admin: Client, tmp_path: Path) -> None:
    """POST /api/models with a path or a repo_id and no name was a 400 "name: Field required"; a user expects the
    checkpoint's own name, as the Hugging Face id's last part or the folder's."""
    (tmp_path / "SmolLM2-135M-Instruct").mkdir()
    folder = checkpoint(tmp_path / "SmolLM2-135M-Instruct", [{"a": 1024}])
    resp = admin.post("/api/models", {"path": f"{folder}/"}, content_type="application/json")
    assert resp.status_code == 201 and resp.json()["name"] == "SmolLM2-135M-Instruct", resp.content
    again = admin.post("/api/models", {"path": str(folder)}, content_type="application/json")
    assert (
        again.status_code == 400 and again.json()["detail"] == "A model named 'SmolLM2-135M-Instruct' already exists."
    )
    assert ModelSource.objects.count() == 1


def test_extra_engine_flags_come_as_an_array_or_as_one_string_as_the_form_takes_them(
    admin: Client,
    smollm2: ModelSource,  # noqa: F811 - the fixture
) -> None:
    def create(name: str, flags: object) -> Any:
        fields = {"name": name, "model": smollm2.name, "max_model_len": 2048, "extra_args": flags}
        return admin.post("/api/deployments", fields, content_type="application/json")

    assert create("a", "--enable-prefix-caching --seed '7'").json()["extra_args"] == [
        "--enable-prefix-caching",
        "--seed",
        "7",
    ]
    assert create("b", ["--seed", "7"]).json()["extra_args"] == ["--seed", "7"]
    refused = create("c", "--seed 'unclosed")
    assert refused.status_code == 400
    assert refused.json()["detail"] == "extra_args: Cannot read these flags: No closing quotation"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"name": "d"}, "model: Field required"),
        (
            {"name": "d", "max_model_len": "2k"},
            "model: Field required; max_model_len: Input should be a whole number, not a string",
        ),
        ([1, 2], "The body must be a JSON object."),
    ],
)
def test_a_malformed_body_names_the_field_as_the_client_wrote_it(
    admin: Client,
    smollm2: ModelSource,  # noqa: F811 - the fixture
    body: object,
    detail: str,
) -> None:
    resp = admin.post("/api/deployments", body, content_type="application/json")
    assert resp.status_code == 400 and resp.json() == {"detail": detail}


def test_a_new_deployment_whose_name_is_taken_even_in_another_case_is_told_which_one(
    admin: Client,
    smollm2: ModelSource,  # noqa: F811 - the fixture
) -> None:
    def create(**names: str) -> Any:
        fields = {"model": smollm2.name, "max_model_len": 2048, **names}
        return admin.post("/api/deployments", fields, content_type="application/json")

    assert create(name="smol").status_code == 201
    assert create(name="smol").json()["detail"] == "A deployment named 'smol' exists already; pick another name."
    clash = create(name="other", served_model_name="smol").json()["detail"]
    assert clash == "Deployment 'smol' serves the model name 'smol' already; pick another served model name."
    in_case = create(name="SMOL").json()["detail"]
    assert in_case.startswith("A deployment named 'smol' exists already; 'SMOL' differs from it only in case")
    served = create(name="big", served_model_name="Smol").json()["detail"]
    assert served.startswith("Deployment 'smol' serves the model name 'smol'; 'Smol' differs from it only in case")
    assert list(Deployment.objects.values_list("name", flat=True)) == ["smol"]


def test_a_session_request_without_its_csrf_token_is_told_the_header(admin_user: object) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)  # type: ignore[arg-type]
    resp = client.post("/api/keys", {"name": "ci"}, content_type="application/json")
    assert resp.status_code == 403 and "X-CSRFToken header" in resp.json()["detail"]
    client.get("/login/")  # sets the csrftoken cookie, as the console's pages do
    token = client.cookies["csrftoken"].value
    resp = client.post("/api/keys", {"name": "ci"}, content_type="application/json", headers={"X-CSRFToken": token})
    assert resp.status_code == 201, resp.content


def test_an_action_with_the_task_queue_away_is_refused_503_and_changes_nothing(admin: Client) -> None:
    """Its task's send failed after the commit: a 500, and the deployment left pending or stopping for ever."""
    stopped, ready = _running("stopped", [0]), _running("ready", [1])
    Deployment.objects.filter(pk=stopped.pk).update(state="stopped")
    with override_settings(CELERY_BROKER_URL="redis://127.0.0.1:1/0"):  # nothing listens on port 1
        for dep, action in ((stopped, "launch"), (ready, "stop")):
            resp = admin.post(f"/api/deployments/{dep.pk}/{action}", content_type="application/json")
            assert resp.status_code == 503, resp.content
            assert resp.json()["detail"].startswith("The task queue (Redis) does not answer (ConnectionError)")
            assert resp.json()["detail"].endswith("nothing was changed. Try again once it is back.")
            page = admin.post(f"/deployments/{dep.pk}/{action}/", follow=True).content.decode()
            assert "The task queue (Redis) does not answer" in page
        assert dict(Deployment.objects.values_list("name", "state")) == {"stopped": "stopped", "ready": "ready"}
        check = {"profile": "chat", "levels": [1, 2], "max_seconds": 30}
        resp = admin.post(f"/api/deployments/{ready.pk}/capacity-checks", check, content_type="application/json")
        assert resp.status_code == 503 and not CapacityRun.objects.exists(), resp.content
        Deployment.objects.filter(pk=ready.pk).update(state="asleep")
        resp = admin.post(f"/api/deployments/{ready.pk}/wake", content_type="application/json")
        assert resp.status_code == 503 and Deployment.objects.get(pk=ready.pk).state == "asleep"
    assert not AuditEntry.objects.filter(action__startswith="deployment.").exclude(action="deployment.create").exists()
