"""The console pages and JSON API as an admin uses them (Django's test client, real PostgreSQL)."""

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings

from console.access.models import ApiKey
from console.catalog.models import ModelSource
from console.deployments.models import Deployment
from tests.conftest import serving
from tests.test_modelconfig import CONFIG, write_safetensors

pytestmark = pytest.mark.django_db
SMOLLM2_CONFIG = json.loads((Path(__file__).parent / "data" / "smollm2-135m-config.json").read_text())


@pytest.fixture
def smollm2() -> ModelSource:
    return ModelSource.objects.create(
        name="smollm2-135m", kind="local", path="/models/smol", config=SMOLLM2_CONFIG, weights_bytes=269_030_016
    )


def test_first_run_creates_the_admin_then_goes_away(client: Client) -> None:
    assert client.get("/login/")["Location"] == "/setup/"
    page = client.get("/setup/").content.decode()
    assert "at least 8 characters" in page and "entirely numeric" in page  # the rules, before the browser's refusal
    resp = client.post("/setup/", {"username": "root", "password": "long-enough-pw", "password2": "long-enough-pw"})
    assert resp.status_code == 302
    assert client.get("/models/").status_code == 200  # logged in as the new admin
    client.logout()
    assert client.get("/setup/")["Location"] == "/login/"


def test_pages_need_a_login(client: Client, admin_user: object) -> None:
    for page in ("/models/", "/deployments/", "/keys/"):
        assert client.get(page)["Location"].startswith("/login/")


def test_it_adds_a_local_model_with_its_real_weight_bytes(admin: Client, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    write_safetensors(tmp_path / "model.safetensors", {"w": 4096})
    resp = admin.post("/models/", {"local-name": "tiny", "local-path": str(tmp_path)}, follow=True)
    assert "Added tiny." in resp.text
    assert ModelSource.objects.get().weights_bytes == 4096


@pytest.mark.parametrize("path", ["/no/such/folder", "relative/path"])
def test_a_bad_model_path_is_explained_and_nothing_is_saved(admin: Client, path: str) -> None:
    resp = admin.post("/models/", {"local-name": "tiny", "local-path": path})
    assert resp.status_code == 200
    assert re.search(r"is not a folder|must be an absolute path", resp.text)
    assert not ModelSource.objects.exists()


def test_the_plan_is_shown_before_launch_with_vllms_own_numbers(admin: Client, smollm2: ModelSource) -> None:
    resp = admin.post(
        "/deployments/plan/",
        {"name": "smol", "model": smollm2.pk, "engine": "vllm-cpu", "max_model_len": 2048, "kv_space_gib": 1},
    )
    assert 'data-field="kv_bytes_per_token">23,040<' in resp.text
    assert 'data-field="kv_capacity_tokens">46,592<' in resp.text
    assert "Fits." in resp.text
    flagged = admin.post(  # what Create refuses, the preview refuses too (a trial's said "Fits." to it)
        "/deployments/plan/",
        {"name": "smol", "model": smollm2.pk, "engine": "vllm-cpu", "max_model_len": 2048, "kv_space_gib": 1,
         "extra_args": "--max-model-len 4096"},
    )  # fmt: skip
    assert "--max-model-len: set it in the deployment&#x27;s fields" in flagged.text and "Fits." not in flagged.text


def test_a_plan_that_does_not_fit_is_refused_with_the_remedy(admin: Client, smollm2: ModelSource) -> None:
    resp = admin.post(
        "/deployments/",
        {"name": "smol", "model": smollm2.pk, "engine": "vllm-cpu", "max_model_len": 8192, "kv_space_gib": 0.01},
    )
    assert "Lower max_model_len to 384 or below" in resp.text
    assert not Deployment.objects.exists()


def test_creating_a_deployment_leads_to_its_page(admin: Client, smollm2: ModelSource) -> None:
    resp = admin.post(
        "/deployments/",
        {"name": "smol", "model": smollm2.pk, "engine": "vllm-cpu", "max_model_len": 2048, "kv_space_gib": 1},
        follow=True,
    )
    dep = Deployment.objects.get()
    assert dep.state == "stopped" and dep.plan["kv_capacity_tokens"] == 46_592
    assert 'data-field="state">not launched yet<' in resp.text and "Launch" in resp.text
    assert 'data-field="provenance">Model /' in resp.text and "version read once it runs" in resp.text
    listed = admin.get("/deployments/").text
    assert 'data-field="state">not launched yet<' in listed and ">stopped<" not in listed
    panel = admin.get(f"/deployments/{dep.pk}/panel/").text
    assert 'data-field="generation_tokens_total">no data<' in panel
    assert ">no price</span>" in panel and "M tokens charged" not in panel  # not "no price / M tokens charged"


def test_max_model_len_left_empty_is_2048_on_the_cpu_and_the_models_own_context_elsewhere(
    admin: Client, smollm2: ModelSource
) -> None:
    """A GPU engine (the simulator is planned as one) gets the model's context, lowered only when it does not fit:
    a fixed 2,048 there would refuse every coding agent's request."""
    admin.post("/deployments/", {"name": "cpu", "model": smollm2.pk, "engine": "vllm-cpu", "kv_space_gib": 1})
    admin.post("/deployments/", {"name": "sim", "model": smollm2.pk, "engine": "simulator"})
    lengths = dict(Deployment.objects.values_list("name", "max_model_len"))
    assert lengths == {"cpu": 2048, "sim": smollm2.config["max_position_embeddings"]}
    form = admin.get("/deployments/").text
    assert "empty: 2,048 on the CPU engines, else the model's own context" in form


def test_stopping_a_stopped_deployment_is_explained(admin: Client, smollm2: ModelSource) -> None:
    admin.post(
        "/deployments/",
        {"name": "smol", "model": smollm2.pk, "engine": "vllm-cpu", "max_model_len": 2048, "kv_space_gib": 1},
    )
    resp = admin.post(f"/deployments/{Deployment.objects.get().pk}/stop/", follow=True)
    assert "nothing to stop" in resp.text


def test_a_key_is_shown_once_and_stored_only_as_a_hash(admin: Client) -> None:
    resp = admin.post("/keys/", {"name": "alice laptop"}, follow=True)
    key = re.search(r'data-field="new_key">([^<]+)<', resp.text).group(1)  # type: ignore[union-attr]
    row = ApiKey.objects.get()
    assert key.startswith(row.prefix) and key not in json.dumps(list(ApiKey.objects.values()), default=str)
    assert key not in admin.get("/keys/").text
    admin.post(f"/keys/{row.pk}/revoke/")
    row.refresh_from_db()
    assert row.revoked_at is not None


def test_the_api_needs_a_session(client: Client) -> None:
    assert client.get("/api/models").status_code == 401


def test_the_api_explains_bad_input_in_its_error_shape(admin: Client) -> None:
    resp = admin.post("/api/models", {"name": "x", "path": "/a", "repo_id": "b/c"}, content_type="application/json")
    assert resp.status_code == 400 and "not several" in resp.json()["detail"]
    resp = admin.post("/api/plan", {"model": "ghost"}, content_type="application/json")
    said = "No model named 'ghost': 'model' is a model's name, not its id; no model is added yet (POST /api/models)."
    assert resp.status_code == 400 and resp.json()["detail"] == said
    resp = admin.post("/api/plan", {"model": 1}, content_type="application/json")
    assert resp.status_code == 400 and "the model's name, as GET /api/models lists it, not its id" in resp.text


def test_an_unreachable_hub_is_a_clear_error_and_saves_nothing(admin: Client) -> None:
    resp = admin.post(
        "/api/models",
        {"name": "smol", "repo_id": "HuggingFaceTB/SmolLM2-135M-Instruct"},
        content_type="application/json",
    )
    assert resp.status_code == 400  # this machine reaches no Hugging Face: the hub client's real error
    assert resp.json()["detail"] == (
        "Hugging Face cannot be reached from this box (Name or service not known); add a local folder, "
        "or a model from the demo catalog."
    )
    assert not ModelSource.objects.exists()
    form = {"hf-name": "smol", "hf-repo_id": "HuggingFaceTB/SmolLM2-135M-Instruct", "hf-revision": "main"}
    page = admin.post("/models/", form).text
    assert "Hugging Face cannot be reached from this box" in page and "Errno" not in page


def test_names_keep_their_case_and_follow_one_rule_in_console_and_api(admin: Client, smollm2: ModelSource) -> None:
    resp = admin.post(
        "/api/deployments",
        {
            "name": "Smol-1.5",
            "model": smollm2.name,
            "max_model_len": 2048,
            "served_model_name": "HuggingFaceTB/SmolLM2-135M",
        },
        content_type="application/json",
    )
    assert resp.status_code == 201 and resp.json()["served_model_name"] == "HuggingFaceTB/SmolLM2-135M"
    assert Deployment.objects.get().name == "Smol-1.5"
    resp = admin.post(
        "/deployments/",
        {
            "name": "x",
            "model": smollm2.pk,
            "engine": "vllm-cpu",
            "max_model_len": 2048,
            "kv_space_gib": 1,
            "served_model_name": "a b/c",
        },
    )
    assert "Served model name &#x27;a b/c&#x27; must start with a letter or digit" in resp.text
    assert Deployment.objects.count() == 1


@pytest.mark.parametrize(
    ("flags", "refused"),
    [
        (["--max-model-len=999999"], "--max-model-len: set it in the deployment's fields"),
        (["--max_model_len", "4096"], "--max-model-len: set it"),
        (["-tp", "8"], "--tensor-parallel-size: set it"),
        (["--port", "1"], "--port: Hearth sets these itself"),
        (["--served-model-name", "other"], "--served-model-name: Hearth sets these itself"),
        (["--max-model", "100000"], "--max-model-len: set it"),  # argparse takes unambiguous prefixes
        (["--api-k", "stolen"], "--api-key: Hearth sets these itself"),
        (["-pp", "2"], "--pipeline-parallel-size: these change what the engine takes of the GPUs"),
        (["--num-gpu-blocks-override=9"], "--num-gpu-blocks-override: these change"),
    ],
)
def test_flags_the_plan_or_hearth_own_are_refused_among_extra_engine_flags(
    admin: Client, smollm2: ModelSource, flags: list[str], refused: str
) -> None:
    resp = admin.post(
        "/api/deployments",
        {"name": "smol", "model": smollm2.name, "max_model_len": 2048, "extra_args": flags},
        content_type="application/json",
    )
    assert resp.status_code == 400 and resp.json()["detail"].startswith(refused)
    assert not Deployment.objects.exists()


@override_settings(HEARTH_GPU_INVENTORY="sim:2xA100-80GB")
def test_gpus_held_by_a_running_deployment_are_not_planned_again(admin: Client, smollm2: ModelSource) -> None:
    def create(name: str) -> Any:
        return admin.post(
            "/api/deployments",
            {"name": name, "model": smollm2.name, "engine": "simulator", "max_model_len": 2048},
            content_type="application/json",
        )

    first = create("first").json()
    assert first["plan"]["gpu_indices"] == [0]
    Deployment.objects.filter(pk=first["id"]).update(state="ready")
    second = create("second").json()
    assert second["plan"]["gpu_indices"] == [1] and "GPU 0 (first)" in second["plan"]["reasons"][0]
    Deployment.objects.filter(pk=second["id"]).update(state="loading")
    wide = admin.post(
        "/api/deployments",
        {"name": "wide", "model": smollm2.name, "engine": "simulator", "tensor_parallel_size": 2},
        content_type="application/json",
    )
    assert "There are no GPUs" not in wide.json()["detail"]  # the refusal's own reason, not the held-GPU note
    third = create("third")
    assert third.status_code == 400 and third.json()["detail"].startswith("Every GPU is held by a deployment serving")
    never = admin.post(  # it fits nowhere on this box: stopping one would not help (a check was told to)
        "/api/deployments",
        {"name": "never", "model": smollm2.name, "engine": "simulator", "tensor_parallel_size": 4},
        content_type="application/json",
    )
    assert never.status_code == 400 and "Stop one first" not in never.json()["detail"], never.json()


def test_extra_engine_flags_from_the_console_form(admin: Client, smollm2: ModelSource) -> None:
    admin.post(
        "/deployments/",
        {
            "name": "smol",
            "model": smollm2.pk,
            "engine": "vllm-cpu",
            "max_model_len": 2048,
            "kv_space_gib": 1,
            "extra_args": "--enable-prefix-caching --seed '7'",
        },
    )
    assert Deployment.objects.get().extra_args == ["--enable-prefix-caching", "--seed", "7"]
    resp = admin.post(
        "/deployments/",
        {
            "name": "bad",
            "model": smollm2.pk,
            "engine": "vllm-cpu",
            "max_model_len": 2048,
            "kv_space_gib": 1,
            "extra_args": "--seed 'unclosed",
        },
    )
    assert "Cannot read these flags" in resp.text and Deployment.objects.count() == 1


@pytest.mark.parametrize(
    ("path", "body", "detail"),
    [
        ("/api/keys", {"name": "k", "max_tokens_cap": 10**20}, "max_tokens_cap must be from 1 to 2,147,483,647"),
        ("/api/keys", {"name": "k", "expires_in_days": 10**9}, "expires_in_days must be from 1 to 36,500"),
        (
            "/api/keys",
            {"name": "k", "max_tokens_cap": "lots"},
            "max_tokens_cap: Input should be a whole number, not a string",
        ),
        ("/api/plan", {"model": "smollm2-135m", "kv_space_gib": 1e308}, "KV space must be above 0 and at most"),
        (
            "/api/deployments",
            {"name": "d" * 101, "model": "smollm2-135m"},
            "Deployment name is 101 characters long; at most 100 are allowed.",
        ),
        (
            "/api/deployments",
            {"name": "d", "model": "smollm2-135m", "max_model_len": 1e12},
            "max_model_len must be 0 (the model's own) or 64 to 2,147,483,647 tokens, not 1,000,000,000,000.",
        ),
        (
            "/api/plan",
            {"model": "smollm2-135m", "max_model_len": 1},
            "max_model_len must be 0 (the model's own) or 64 to 2,147,483,647 tokens, not 1: a shorter context",
        ),
        (
            "/api/deployments",
            {"name": "d", "model": "smollm2-135m", "max_model_len": True},
            "max_model_len: Input should be a whole number, not a boolean",
        ),
        (
            "/api/plan",
            {"model": "smollm2-135m", "fit_max_tokens": "yes"},
            "fit_max_tokens: Input should be a valid boolean",
        ),
        (
            "/api/deployments",
            {"name": "d", "model": "smollm2-135m", "tensor_parallel_size": 4},
            "vllm-cpu runs on the CPU, in one process: tensor parallel size and gpu_memory_utilization are for GPU",
        ),
        (
            "/api/plan",
            {"model": "smollm2-135m", "tensor_parallel_size": 65},
            "Tensor parallel size must be 0 (auto) to 64 GPUs, not 65.",
        ),
        (
            "/api/plan",
            {"model": "smollm2-135m", "gpu_memory_utilization": 1.5},
            "gpu_memory_utilization must be 0 (auto) or a ratio below 1, not 1.5.",
        ),
    ],
)
def test_out_of_range_and_mistyped_input_is_a_400_not_a_500(
    admin: Client, smollm2: ModelSource, path: str, body: dict[str, object], detail: str
) -> None:
    resp = admin.post(path, body, content_type="application/json")
    assert resp.status_code == 400 and detail in resp.json()["detail"]


def test_stopped_deployments_and_unused_models_can_be_deleted(admin: Client, smollm2: ModelSource) -> None:
    dep = admin.post(
        "/api/deployments",
        {"name": "smol", "model": smollm2.name, "max_model_len": 2048},
        content_type="application/json",
    ).json()
    assert [d["name"] for d in admin.get("/api/deployments").json()] == ["smol"]
    resp = admin.delete(f"/api/models/{smollm2.pk}")
    assert resp.status_code == 400 and "used by smol" in resp.json()["detail"]
    Deployment.objects.filter(pk=dep["id"]).update(state="ready")
    assert admin.delete(f"/api/deployments/{dep['id']}").json()["detail"].startswith("smol is ready; stop it")
    Deployment.objects.filter(pk=dep["id"]).update(state="stopping")
    stopping = admin.delete(f"/api/deployments/{dep['id']}").json()["detail"]
    assert stopping.startswith("smol is stopping; wait until it has stopped")
    Deployment.objects.filter(pk=dep["id"]).update(state="stopped")
    assert admin.delete(f"/api/deployments/{dep['id']}").status_code == 204
    assert admin.post(f"/models/{smollm2.pk}/delete/", follow=True).status_code == 200
    assert not ModelSource.objects.exists()


def test_keys_are_listed_without_their_secret(admin: Client) -> None:
    serving("smol")
    created = admin.post("/api/keys", {"name": "ci", "allowed_models": ["smol"]}, content_type="application/json")
    [listed] = admin.get("/api/keys").json()
    names = ("id", "name", "prefix", "owner", "allowed_models", "max_tokens_cap", "revoked", "requests_today")
    assert {k: listed[k] for k in names} == {
        "id": created.json()["id"],
        "name": "ci",
        "prefix": created.json()["prefix"],
        "owner": "admin",
        "allowed_models": ["smol"],
        "max_tokens_cap": None,
        "revoked": False,
        "requests_today": 0,
    }
    assert "key" not in listed and "key_hash" not in listed and created.json()["key"] not in json.dumps(listed)


def test_the_api_docs_page_needs_no_internet(admin: Client) -> None:
    page = admin.get("/api/docs").content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in page and "cdn." not in page


@pytest.mark.parametrize(
    ("body", "error"), [({"allowed_models": [""]}, "Allowed model ''"), ({"name": "a\u0000b"}, "printable")]
)
def test_a_key_never_widens_by_accident(admin: Client, body: dict[str, object], error: str) -> None:
    resp = admin.post("/api/keys", {"name": "k"} | body, content_type="application/json")
    assert resp.status_code == 400 and error in resp.json()["detail"]
    assert not ApiKey.objects.exists()


def test_a_checkpoint_folder_make_up_put_in_the_cache_is_offered_once_until_added(
    admin: Client, tmp_path: Path, settings: Any
) -> None:
    settings.HEARTH_CACHE_DIR = tmp_path
    folder = tmp_path / "models" / "SmolLM2-135M-Instruct"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    write_safetensors(folder / "model.safetensors", {"w": 4096})
    (tmp_path / "models" / "notes").mkdir()  # no config.json: not a checkpoint
    page = admin.get("/models/").content.decode()
    assert "No models yet. Add one found on this box (below) or your own" in page
    assert f'name="local-path" value="{folder}"' in page and "Add as smollm2-135m-instruct</button>" in page
    assert "notes" not in page.split('data-section="found"')[1]
    added = admin.post("/models/", {"local-name": "smollm2-135m-instruct", "local-path": str(folder)}, follow=True)
    assert "Added smollm2-135m-instruct." in added.text and 'data-section="found"' not in added.text
    settings.HEARTH_CACHE_DIR = tmp_path / "nowhere"
    assert admin.get("/models/").status_code == 200  # no models folder: nothing offered, no error
