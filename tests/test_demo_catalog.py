"""The demo catalog: the published configurations (console/catalog/demo) offered as models to plan and simulate,
one click from the models page to a plan on the simulated box, and refused by engines that need weights.

The live test at the end runs the whole newcomer's path against real processes: a 70B from the catalog planned on
the simulated 8× H100, launched on the simulator by the Celery worker, and streamed through the openai and
anthropic SDKs via the gateway.
"""

import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client, override_settings

from console.catalog.demo import DEMO_DIR, SIZE_KINDS, demo_model, demo_models
from console.catalog.models import ModelSource
from console.deployments.models import Deployment
from tests.conftest import Workers, login
from tests.simworld import Served, wait_state

pytestmark = pytest.mark.django_db
LLAMA_70B_BYTES = 141_107_412_992  # meta-llama/Llama-3.1-70B's published index total_size


def test_every_published_configuration_is_in_the_catalog_with_its_bytes_and_sources() -> None:
    models = demo_models()
    assert len(models) == len(list(DEMO_DIR.glob("*.json"))) >= 25
    for entry in models:
        raw = json.loads((DEMO_DIR / f"{entry.name}.json").read_text())
        assert (entry.repo_id, entry.weights_bytes) == (raw["model"], raw["total_size"])
        assert entry.size_how == SIZE_KINDS[raw["total_size_kind"]] and entry.size_source and entry.config_source
    names = {m.name for m in models}
    wanted = {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "deepseek-v3", "gpt-oss-120b", "mixtral-8x7b-v0.1"}
    assert wanted <= names
    assert demo_model("deepseek-v3").shape == "MoE, 256 experts (8 active), MLA"  # type: ignore[union-attr]
    assert demo_model("no-such-model") is None


def test_the_models_page_offers_the_catalog_open_in_demo_mode(admin: Client) -> None:
    page = admin.get("/models/").text
    assert '<details id="demo-catalog" class="demo-catalog" open>' in page  # pytest-env: sim:8xH100-80GB
    row = re.search(r'<tr data-demo="llama-3.1-70b">(.*?)</tr>', page, re.S)
    assert row and "<code>meta-llama/Meta-Llama-3.1-70B</code>" in row[1] and "131.4 GiB" in row[1]
    assert 'action="/models/demo/llama-3.1-70b/"' in row[1] and "Plan on this box" in row[1]
    assert " GB" not in page  # binary units only
    assert "find_string" not in page and "search tool" not in page  # the citations are the API's, not a hover


@override_settings(HEARTH_GPU_INVENTORY="auto")
def test_on_a_real_box_the_catalog_is_there_but_closed(admin: Client) -> None:
    page = admin.get("/models/").text
    assert '<details id="demo-catalog" class="demo-catalog">' in page and "This box is simulated" not in page


def test_one_click_adds_the_model_once_and_opens_its_plan_on_the_simulator(admin: Client) -> None:
    resp = admin.post("/models/demo/llama-3.1-70b/")
    model = ModelSource.objects.get(name="llama-3.1-70b")
    assert (model.kind, model.repo_id) == ("demo", "meta-llama/Meta-Llama-3.1-70B")
    assert model.weights_bytes == LLAMA_70B_BYTES
    target = urlsplit(resp["Location"])
    assert target.path == "/deployments/"
    assert parse_qs(target.query) == {
        "model": [str(model.pk)],
        "engine": ["simulator"],
        "name": ["llama-3.1-70b"],
        "max_model_len": ["0"],
    }
    assert admin.post("/models/demo/llama-3.1-70b/")["Location"] == resp["Location"]  # the same model again
    assert ModelSource.objects.count() == 1
    form = admin.get(resp["Location"]).text
    assert f'<option value="{model.pk}" selected>llama-3.1-70b</option>' in form
    assert '<option value="simulator" selected>' in form and 'value="llama-3.1-70b"' in form
    assert re.search(r'name="max_model_len" value="0"', form)
    listed = admin.get("/models/").text
    assert "meta-llama/Meta-Llama-3.1-70B (demo catalog: configuration and size, no weights)" in listed


def test_the_70b_plan_on_the_simulated_8x_h100_box(admin: Client) -> None:
    admin.post("/models/demo/llama-3.1-70b/")
    model = ModelSource.objects.get(name="llama-3.1-70b")
    plan = admin.post(
        "/deployments/plan/", {"name": "llama-70b", "model": model.pk, "engine": "simulator", "max_model_len": 8192}
    ).text
    assert "Fits." in plan and "8× NVIDIA H100 80GB HBM3 (79.6 GiB each), simulated" in plan
    assert "131.4 GiB (141,107,412,992 bytes)" in plan
    assert 'data-field="kv_bytes_per_token">327,680<' in plan  # 2 × 80 layers × 8 KV heads × 128 × 2 bytes
    assert " GB" not in plan and 'data-field="note"' not in plan


def test_an_engine_that_needs_weights_is_refused_with_the_way_out(admin: Client) -> None:
    admin.post("/models/demo/llama-3.1-8b/")
    model = ModelSource.objects.get(name="llama-3.1-8b")
    form = {"name": "x", "model": model.pk, "engine": "vllm-cpu", "max_model_len": 2048}
    plan = admin.post("/deployments/plan/", form).text
    assert 'data-field="note">llama-3.1-8b is from the demo catalog' in plan
    resp = admin.post("/deployments/", form)
    assert "only the Simulator can run it" in resp.text
    assert "add meta-llama/Meta-Llama-3.1-8B from Hugging Face" in resp.text
    assert not Deployment.objects.exists()
    resp = admin.post("/deployments/", {"name": "x", "model": model.pk, "engine": "simulator", "max_model_len": 2048})
    assert resp.status_code == 302 and Deployment.objects.get().engine == "simulator"


def test_the_api_lists_and_adds_catalog_entries(admin: Client) -> None:
    listed = admin.get("/api/models/demo").json()
    assert {"name": "gpt-oss-20b", "repo_id": "openai/gpt-oss-20b"}.items() <= next(
        e for e in listed if e["name"] == "gpt-oss-20b"
    ).items()
    resp = admin.post("/api/models", {"demo": "gpt-oss-20b"}, content_type="application/json")
    assert resp.status_code == 201 and resp.json()["kind"] == "demo" and resp.json()["name"] == "gpt-oss-20b"
    again = admin.post("/api/models", {"demo": "gpt-oss-20b"}, content_type="application/json")
    assert again.status_code == 200 and again.json()["id"] == resp.json()["id"]  # added once, not created again
    resp = admin.post("/api/models", {"demo": "gpt-5"}, content_type="application/json")
    assert resp.status_code == 400 and resp.json()["detail"].startswith("The demo catalog has no model 'gpt-5': name")
    resp = admin.post("/api/models", {"demo": "Qwen/Qwen3-0.6B"}, content_type="application/json")  # as shown
    assert resp.status_code == 201 and resp.json()["name"] == "qwen3-0.6b"


@pytest.mark.django_db(transaction=True)
def test_a_70b_from_the_catalog_is_launched_on_the_simulator_and_streams_through_both_sdks(
    web: str, worker: Workers, admin_user: object
) -> None:
    client = login(web)
    assert client.post("/api/models", json={"demo": "llama-3.1-70b"}).status_code == 201
    resp = client.post(
        "/api/deployments",
        json={"name": "llama-70b", "model": "llama-3.1-70b", "engine": "simulator", "max_model_len": 8192},
    )
    assert resp.status_code == 201, resp.text
    dep_id = resp.json()["id"]
    assert client.post(f"/api/deployments/{dep_id}/launch").status_code == 202
    try:
        dep = wait_state(client, dep_id, {"ready", "failed"})
        assert dep["state"] == "ready", (dep, worker.output()[-3000:])
        assert dep["plan"]["tensor_parallel_size"] >= 2 and dep["plan"]["weights_bytes"] == LLAMA_70B_BYTES
        assert re.fullmatch(r"GPUs 0(, \d)+: \d× NVIDIA H100 80GB HBM3 \(simulated\)", dep["gpu_model"])
        served = Served(web, client, dep_id, client.post("/api/keys", json={"name": "walk"}).json()["key"])
        chunks = served.openai().chat.completions.create(
            model="llama-70b", messages=[{"role": "user", "content": "Hi"}], stream=True, max_tokens=16
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        with served.anthropic().messages.stream(
            model="llama-70b", max_tokens=16, messages=[{"role": "user", "content": "Hi"}]
        ) as stream:
            assert "".join(stream.text_stream)
    finally:
        client.post(f"/api/deployments/{dep_id}/stop")
        wait_state(client, dep_id, {"stopped", "failed"})


def test_a_model_too_big_for_every_split_is_shown_at_the_largest_one(admin: Client) -> None:
    """A fresh user's trial: DeepSeek-V3 on the 8× H100 box was explained at tensor parallel 1 on 1 GPU."""
    admin.post("/api/models", {"demo": "deepseek-v3"}, content_type="application/json")
    plan = admin.post("/api/plan", {"model": "deepseek-v3", "engine": "simulator"}, content_type="application/json")
    gpu = plan.json().get("gpu") or plan.json()
    assert not gpu["fits"] and gpu["tensor_parallel_size"] == 8, gpu
