"""Export for a cluster from the console and /api: the documents engines.export writes, filled with what
the appliance knows of a deployment (its pinned image, model revision, plan, flags), or the reason not."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client

from console.catalog.models import ModelSource
from console.deployments import admin_actions
from console.deployments.models import Deployment
from engines.export.node_labels import valid_label_value
from engines.supported import SUPPORTED_ENGINES
from tests.simworld import ensure_model

pytestmark = pytest.mark.django_db
DIGEST = "sha256:" + "ab" * 32
REVISION = "0e9e39f249a16976918f6564b8830bc894c89659"
SMOLLM2_CONFIG = json.loads((Path(__file__).parent / "data" / "smollm2-135m-config.json").read_text())


def planned(engine: str = "simulator", **fields: Any) -> Deployment:
    """llama-8b planned on the simulated 8× H100 box at TP 2, then given ``engine`` and ``fields``."""
    ensure_model()
    dep = admin_actions.create_deployment(
        name=f"llama-{engine}",
        model=ModelSource.objects.get(name="llama-8b"),
        engine="simulator",
        max_model_len=8192,
        tensor_parallel_size=2,
        extra_args=["--enable-prefix-caching"],
    )
    Deployment.objects.filter(pk=dep.pk).update(engine=engine, **fields)
    dep.refresh_from_db()
    return dep


def test_a_vllm_deployment_exports_its_pinned_image_revision_plan_and_flags(admin: Client) -> None:
    dep = planned(
        "vllm",
        engine_image=f"vllm/vllm-openai@{DIGEST}",
        engine_image_ref="vllm/vllm-openai:v0.11.0",
        engine_version="0.11.0",
    )
    exports = {e["target"]: e for e in admin.get(f"/api/deployments/{dep.pk}/export").json()}
    assert set(exports) == {"production-stack", "kserve", "lws"}
    helm = exports["production-stack"]
    assert helm["offered"] and exports["kserve"]["offered"]
    spec = yaml.safe_load(helm["text"])["servingEngineSpec"]["modelSpec"][0]
    assert spec["tag"] == f"v0.11.0@{DIGEST}" and spec["modelRevision"] == REVISION
    assert spec["vllmConfig"]["tensorParallelSize"] == 2 and spec["vllmConfig"]["maxModelLen"] == 8192
    assert spec["vllmConfig"]["gpuMemoryUtilization"] == dep.plan["gpu_memory_utilization"]
    assert spec["vllmConfig"]["extraArgs"][-1] == "--enable-prefix-caching"
    assert not exports["lws"]["offered"] and exports["lws"]["notes"]  # TP 2 fits one 8-GPU node
    assert dep.replicas.count() == 0  # exporting launches nothing


def test_the_console_offers_each_file_for_download_and_says_why_one_is_not(admin: Client) -> None:
    dep = planned("vllm", engine_image=f"vllm/vllm-openai@{DIGEST}", engine_version="0.11.0")
    page = admin.get(f"/deployments/{dep.pk}/export/").content.decode()
    assert f"/deployments/{dep.pk}/export/kserve/" in page and "Not offered." in page
    resp = admin.get(f"/deployments/{dep.pk}/export/kserve/")
    assert resp["Content-Type"].startswith("application/yaml")
    assert "attachment" in resp["Content-Disposition"]
    service = yaml.safe_load(resp.content)
    assert service["kind"] == "InferenceService" and DIGEST in service["spec"]["predictor"]["model"]["image"]
    refused = admin.get(f"/deployments/{dep.pk}/export/lws/", follow=True)
    assert "LeaderWorkerSet" in refused.content.decode() and "not offered" in refused.content.decode()


def test_a_plan_wider_than_the_clusters_nodes_is_exported_as_a_leader_worker_set(admin: Client) -> None:
    dep = planned("vllm", engine_image=f"vllm/vllm-openai@{DIGEST}", engine_version="0.11.0")
    exports = {e["target"]: e for e in admin.get(f"/api/deployments/{dep.pk}/export?gpus_per_node=1").json()}
    assert exports["lws"]["offered"] and not exports["production-stack"]["offered"]
    kinds = [doc["kind"] for doc in yaml.safe_load_all(exports["lws"]["text"])]
    assert "LeaderWorkerSet" in kinds


def test_a_simulator_deployment_exports_what_vllm_would_run_and_says_so(admin: Client) -> None:
    dep = planned()
    exports = {e["target"]: e for e in admin.get(f"/api/deployments/{dep.pk}/export").json()}
    helm = exports["production-stack"]
    assert helm["offered"] and "simulator" in helm["notes"][0]
    spec = yaml.safe_load(helm["text"])["servingEngineSpec"]["modelSpec"][0]
    assert f"{spec['repository']}:{spec['tag']}" == SUPPORTED_ENGINES["vllm"].image  # the configured image, no digest


def test_a_demo_catalog_model_is_not_offered_for_export_and_the_api_says_why(admin: Client) -> None:
    assert admin.post("/api/models", {"demo": "llama-3.1-70b"}, content_type="application/json").status_code == 201
    dep = admin.post(
        "/api/deployments",
        {"name": "demo70", "model": "llama-3.1-70b", "engine": "simulator"},
        content_type="application/json",
    ).json()
    resp = admin.get(f"/api/deployments/{dep['id']}/export")
    assert resp.status_code == 400 and "demo catalog entry, with no pinned revision" in resp.json()["detail"]
    assert "meta-llama/Meta-Llama-3.1-70B from Hugging Face" in resp.json()["detail"]
    page = admin.get(f"/deployments/{dep['id']}/").content.decode()
    assert "Export for a cluster" not in page and "Capacity check…" in page and "· ·" not in page


def test_an_engine_no_cluster_target_runs_is_refused_with_the_reason(admin: Client) -> None:
    model = ModelSource.objects.create(
        name="smol", kind="local", path="/models/smol", config=SMOLLM2_CONFIG, weights_bytes=269_030_016
    )
    dep = admin_actions.create_deployment(name="cpu", model=model, engine="vllm-cpu", max_model_len=2048)
    resp = admin.get(f"/api/deployments/{dep.pk}/export")
    assert resp.status_code == 400 and "cannot be exported" in resp.json()["detail"]
    assert "cannot be exported" in admin.get(f"/deployments/{dep.pk}/export/").content.decode()


def test_an_unknown_target_is_a_400_in_the_apis_shape(admin: Client) -> None:
    dep = planned("vllm", engine_version="0.11.0")
    resp = admin.get(f"/api/deployments/{dep.pk}/export/helmfile")
    assert resp.status_code == 400 and "Unknown export target" in resp.json()["detail"]


def test_the_node_selector_is_the_nvml_product_name_and_memory_not_the_consoles_sentence(admin: Client) -> None:
    """On the simulated 8× H100 box the plan's words say "(simulated)"; the labels are NVML's, as GFD writes them."""
    dep = planned("vllm", engine_image=f"vllm/vllm-openai@{DIGEST}", engine_version="0.11.0", gpu_model="")
    launched_words = "GPUs 0, 1: 2× NVIDIA H100 80GB HBM3 (simulated)"  # what launching stores (gpus_in_words)
    Deployment.objects.filter(pk=dep.pk).update(gpu_model=launched_words)
    assert "(simulated)" in dep.stored_plan.gpu_name
    exports = {e["target"]: e for e in admin.get(f"/api/deployments/{dep.pk}/export").json()}
    isvc = yaml.safe_load(exports["kserve"]["text"])
    selector = isvc["spec"]["predictor"]["nodeSelector"]
    assert selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}
    assert all(valid_label_value(value) for value in selector.values())
    terms = yaml.safe_load(exports["production-stack"]["text"])["servingEngineSpec"]["modelSpec"][0][
        "nodeSelectorTerms"
    ]
    assert {e["key"]: e["values"] for e in terms[0]["matchExpressions"]} == {k: [v] for k, v in selector.items()}
    assert "simulated" not in exports["kserve"]["text"].split("apiVersion:", 1)[1]


def test_without_the_planned_gpus_in_the_inventory_no_node_is_selected(admin: Client, settings: Any) -> None:
    dep = planned("vllm", engine_image=f"vllm/vllm-openai@{DIGEST}", engine_version="0.11.0")
    settings.HEARTH_GPU_INVENTORY = "sim:1xH100-80GB"  # the plan holds GPUs 0 and 1; this box has one
    exports = {e["target"]: e for e in admin.get(f"/api/deployments/{dep.pk}/export?gpus_per_node=8").json()}
    assert exports["kserve"]["offered"] and "nodeSelector" not in exports["kserve"]["text"]
