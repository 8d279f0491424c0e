"""Cluster exports that deploy as they are: the KServe pod after KServe's own merge with its vLLM runtime has
requests within limits; GPU node selectors are GPU feature discovery's labels, valid label values; the
production-stack values route by prefix with a pinned router and size the engines' startup probe from the
weights; the LeaderWorkerSet says where the weights live. Plain data, no DB.

KServe's merge is replayed here from its source, kserve/kserve @ 1fb781055dd1567164358233e1125142ca6ef1fe (tag
v0.20.0): pkg/controller/v1beta1/inferenceservice/utils/utils.go ``MergeRuntimeContainers`` calls
pkg/utils/container_merge.go ``MergeContainerWithPatch(runtime, isvc)``, apimachinery's
``strategicpatch.StrategicMergePatch`` of the InferenceService's container over the runtime's for a
``corev1.Container``, then puts the runtime's args before the InferenceService's. A strategic merge replaces a
list unless the Go type tags it ``patchStrategy:"merge"`` with a ``patchMergeKey`` (k8s.io/api core/v1 types.go:
env by name, ports by containerPort, volumeMounts by mountPath, volumeDevices by devicePath), merges maps and
structs key by key, and deletes a key the patch sets to null. The runtime is
tests/data/cluster/kserve-0.20.0-vllmserver-runtime.yaml; its webhook sets no resource defaults on a
``predictor.model`` (pkg/apis/serving/v1beta1: only the per-framework predictors call setResourceRequirementDefaults).
"""

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from engines.export import ClusterFacts
from engines.export.document import DOWNLOAD_BYTES_PER_SECOND, ENGINE_START_SECONDS, LOAD_BYTES_PER_SECOND
from engines.export.node_labels import MEMORY, PRODUCT, gfd_product, gpu_node_labels, valid_label_value
from engines.gpus import SIM_PROFILES
from tests.test_cluster_export import BASE, CASES, SCHEMAS, TARGET_CASES, facts_for, offered

DATA = Path(__file__).parent / "data" / "cluster"
RUNTIME = yaml.safe_load((DATA / "kserve-0.20.0-vllmserver-runtime.yaml").read_text())
MERGE_KEYS = {"env": "name", "ports": "containerPort", "volumeMounts": "mountPath", "volumeDevices": "devicePath"}
# predictor.model's fields that are not a container's (v1beta1 ModelSpec and PredictorExtensionSpec)
NOT_CONTAINER = {"modelFormat", "runtime", "storageUri", "runtimeVersion", "protocolVersion", "storage"}
_SUFFIX = {"m": Decimal("0.001"), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12)}
_SUFFIX |= {"Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40)}


def strategic_merge(base: dict[str, Any], patch: dict[str, Any], top: bool = True) -> dict[str, Any]:
    """``patch`` over ``base`` as a strategic merge patch of a core/v1 Container does (module docstring)."""
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = strategic_merge(out[key], value, top=False)
        elif top and key in MERGE_KEYS and isinstance(value, list) and isinstance(out.get(key), list):
            merge_key, items = MERGE_KEYS[key], list(out[key])
            for item in value:
                at = next((i for i, old in enumerate(items) if old[merge_key] == item[merge_key]), None)
                if at is None:
                    items.append(item)
                else:
                    items[at] = strategic_merge(items[at], item, top=False)
            out[key] = items
        else:
            out[key] = value
    return out


def kserve_container(isvc: dict[str, Any]) -> dict[str, Any]:
    """The predictor's container as KServe 0.20.0 runs it: MergeRuntimeContainers(runtime, isvc)."""
    runtime = RUNTIME["spec"]["containers"][0]
    model = {k: v for k, v in isvc["spec"]["predictor"]["model"].items() if k not in NOT_CONTAINER}
    merged = strategic_merge(runtime, model)
    merged["args"] = [*runtime.get("args", []), *model.get("args", [])]
    merged["name"] = merged.get("name") or runtime["name"]
    return merged


def quantity(text: str) -> Decimal:
    """A Kubernetes quantity ("6", "400m", "24Gi", "1.5G") as a number."""
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * _SUFFIX[suffix]
    return Decimal(text)


def over_limits(resources: dict[str, Any]) -> list[str]:
    """What the API server refuses in a container's resources: a request above its limit (cpu, memory), an
    extended resource (GPUs) requested unequal to its limit, or requested with no limit."""
    requests, limits = resources.get("requests", {}), resources.get("limits", {})
    wrong = [
        f"{name} {requests[name]} > {limits[name]}"
        for name in ("cpu", "memory")
        if name in limits and name in requests and quantity(str(requests[name])) > quantity(str(limits[name]))
    ]
    for name in (n for n in {*requests, *limits} if "/" in n):
        if quantity(str(requests.get(name, limits.get(name)))) != quantity(str(limits.get(name, "-1"))):
            wrong.append(f"{name} requests {requests.get(name)} limits {limits.get(name)}")
    return wrong


KSERVE_CASES = [case for case, target in TARGET_CASES if target == "kserve"]


def test_the_merge_replay_follows_kserves_rule() -> None:
    base = {"name": "c", "args": ["--a"], "env": [{"name": "X", "value": "1"}], "resources": {"limits": {"cpu": "1"}}}
    patch = {"args": ["--b"], "env": [{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}]}
    merged = strategic_merge(base, patch | {"resources": {"limits": {"memory": "1Gi"}}})
    assert merged["args"] == ["--b"]  # a plain list is replaced (MergeRuntimeContainers then concatenates)
    assert merged["env"] == [{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}]
    assert merged["resources"] == {"limits": {"cpu": "1", "memory": "1Gi"}}  # maps merge key by key


def test_requests_over_the_runtimes_limits_are_what_the_merge_refuses() -> None:
    """The export before this fix (requests 6 CPUs / 24Gi, limits for GPUs only) fails the check: it bites."""
    isvc = offered(facts_for("hf-tp4-two-replicas-fp8-kv"))["kserve"].documents[0]
    model = isvc["spec"]["predictor"]["model"]
    old = {
        **isvc,
        "spec": {
            "predictor": {
                **isvc["spec"]["predictor"],
                "model": {
                    **model,
                    "resources": {
                        "requests": {"cpu": "6", "memory": "24Gi", "nvidia.com/gpu": "4"},
                        "limits": {"nvidia.com/gpu": "4"},
                    },
                },
            }
        },
    }
    assert over_limits(kserve_container(old)["resources"]) == ["cpu 6 > 1", "memory 24Gi > 2Gi"]


@pytest.mark.parametrize("case", KSERVE_CASES)
def test_the_kserve_pod_after_the_runtime_merge_has_requests_within_limits(case: str) -> None:
    isvc = offered(facts_for(case))["kserve"].documents[0]
    container = kserve_container(isvc)
    assert over_limits(container["resources"]) == []
    gpus = str(facts_for(case).tensor_parallel_size)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == container["resources"]["requests"]["nvidia.com/gpu"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
    assert container["args"][:3] == RUNTIME["spec"]["containers"][0]["args"]  # the runtime's, then the export's
    assert container["startupProbe"]["httpGet"]["path"] == "/health"  # the export's path over the runtime's


@pytest.mark.parametrize(
    ("nvml", "label"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("NVIDIA  GeForce RTX 4090 ", "NVIDIA-GeForce-RTX-4090"),
        ("Tesla V100 (PCIe)", "Tesla-V100-PCIe"),  # GFD drops what a label cannot hold
    ],
)
def test_the_product_label_is_gpu_feature_discoverys(nvml: str, label: str) -> None:
    assert gfd_product(nvml) == label


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("NVIDIA-H100-80GB-HBM3", True),
        ("81559", True),
        ("", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("-x", False),
        ("x.", False),
        ("GPUs-0,-1:-4×-NVIDIA-H100-(simulated)", False),
        ("a_b.c-d", True),
    ],
)
def test_label_values_follow_kubernetes_rule(value: str, valid: bool) -> None:
    assert valid_label_value(value) is valid


@pytest.mark.parametrize("profile", sorted(SIM_PROFILES))
def test_every_simulated_gpu_gets_valid_labels_without_simulated_in_them(profile: str) -> None:
    box = SIM_PROFILES[profile]
    labels, left_out = gpu_node_labels(box.gpu_name, box.memory_mib * 2**20)
    assert left_out == [] and set(labels) == {PRODUCT, MEMORY}
    assert all(valid_label_value(v) for v in labels.values()) and "simulated" not in labels[PRODUCT]
    assert labels[MEMORY] == str(box.memory_mib)


def test_a_name_gfd_cannot_label_is_left_out_with_the_reason() -> None:
    labels, left_out = gpu_node_labels("NVIDIA " + "X" * 70, 0)
    assert labels == {} and PRODUCT in left_out[0] and MEMORY in left_out[1]


def _selectors(target: str, document: dict[str, Any]) -> list[dict[str, str]]:
    if target == "kserve":
        return [document["spec"]["predictor"]["nodeSelector"]]
    if target == "lws":
        template = document["spec"]["leaderWorkerTemplate"]
        return [template[role]["spec"]["nodeSelector"] for role in ("leaderTemplate", "workerTemplate")]
    terms = document["servingEngineSpec"]["modelSpec"][0]["nodeSelectorTerms"]
    return [{e["key"]: e["values"][0] for term in terms for e in term["matchExpressions"]}]


@pytest.mark.parametrize(("case", "target"), [(c, t) for c, t in TARGET_CASES if facts_for(c).gpu_model])
def test_every_export_keeps_its_pods_on_the_planned_gpus_by_valid_labels(case: str, target: str) -> None:
    export = offered(facts_for(case))[target]
    for selector in _selectors(target, export.documents[0]):
        assert selector == {PRODUCT: "NVIDIA-H100-80GB-HBM3", MEMORY: "81920"}
        assert all(valid_label_value(value) for value in selector.values())
    assert any("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3" in note for note in export.notes)


def test_no_gpu_named_no_selector() -> None:
    for export in offered(facts_for("local-folder-one-gpu-no-digest")).values():
        assert "nodeSelector" not in export.text and "nvidia.com/gpu.product" not in export.text


def test_production_stack_routes_by_prefix_with_a_pinned_router_and_validates() -> None:
    values = offered(facts_for("hf-tp4-two-replicas-fp8-kv"))["production-stack"].documents[0]
    assert values["routerSpec"]["routingLogic"] == "prefixaware"
    assert (values["routerSpec"]["repository"], values["routerSpec"]["tag"]) == ("lmcache/lmstack-router", "v0.1.12")
    SCHEMAS["production-stack"].validate(values)  # jsonschema, the chart's helm/values.schema.json at 0.1.12
    wrong = {**values, "routerSpec": {**values["routerSpec"], "routingLogic": "prefix"}}
    assert not SCHEMAS["production-stack"].is_valid(wrong)


def allowed_seconds(probe: dict[str, int]) -> int:
    """How long a startup probe lets a container start: its delay, then failureThreshold periods."""
    return probe["initialDelaySeconds"] + probe["failureThreshold"] * probe["periodSeconds"]


def test_the_startup_probe_allows_the_download_and_the_load_of_the_weights() -> None:
    facts = facts_for("hf-tp4-two-replicas-fp8-kv")  # 141 GiB of weights from the hub
    probe = offered(facts)["production-stack"].documents[0]["servingEngineSpec"]["startupProbe"]
    need = (
        ENGINE_START_SECONDS
        + facts.weights_bytes / DOWNLOAD_BYTES_PER_SECOND
        + facts.weights_bytes / LOAD_BYTES_PER_SECOND
    )
    assert need <= allowed_seconds(probe) < need + probe["periodSeconds"]
    assert allowed_seconds(probe) > 615  # the chart's default, ~10 minutes, is far too short for 141 GiB
    local = offered(facts_for("local-folder-one-gpu-no-digest"))["production-stack"].documents[0]
    copied = ENGINE_START_SECONDS + facts.weights_bytes / LOAD_BYTES_PER_SECOND  # already on the volume: no download
    assert allowed_seconds(local["servingEngineSpec"]["startupProbe"]) == pytest.approx(copied, abs=10)
    isvc = offered(facts)["kserve"].documents[0]["spec"]["predictor"]["model"]["startupProbe"]
    assert allowed_seconds(isvc) == pytest.approx(copied, abs=30)  # KServe's storage initializer downloads first
    bigger = ClusterFacts(**BASE | {"weights_bytes": 2 * facts.weights_bytes})
    assert allowed_seconds(offered(bigger)["production-stack"].documents[0]["servingEngineSpec"]["startupProbe"]) > (
        allowed_seconds(probe)
    )
    assert any("GiB of weights downloaded at 50 MB/s" in n for n in offered(facts)["production-stack"].notes)


def test_an_unknown_checkpoint_size_gets_an_hour_and_says_so() -> None:
    export = offered(ClusterFacts(**BASE | {"weights_bytes": 0}))["production-stack"]
    assert allowed_seconds(export.documents[0]["servingEngineSpec"]["startupProbe"]) == pytest.approx(3600, abs=10)
    assert any("checkpoint's size is unknown" in note for note in export.notes)


@pytest.mark.parametrize("case", ["multi-node-tp16-on-8-gpu-nodes", "multi-node-tp8-on-6-gpu-nodes"])
def test_every_pod_of_a_leader_worker_set_shares_the_weights_volume_the_notes_name(case: str) -> None:
    export = offered(facts_for(case))["lws"]
    template = export.documents[0]["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        pod = template[role]["spec"]
        claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
        assert claims == ["meta-llama-llama-3-1-70b-instruct-model"]
        container = pod["containers"][0]
        assert {"name": "model", "mountPath": "/models", "readOnly": False} in container["volumeMounts"]
        assert {"name": "HF_HOME", "value": "/models/huggingface"} in container["env"]
    weights = next(note for note in export.notes if note.startswith("Weights:"))
    assert "PersistentVolumeClaim meta-llama-llama-3-1-70b-instruct-model of at least 156Gi" in weights
    assert "ReadWriteMany" in weights and "hostPath" in weights
    assert "Weights: every pod" in export.text  # the notes are the file's comment lines


def test_a_local_models_leader_worker_set_reads_it_from_the_volume() -> None:
    facts = ClusterFacts(**BASE | CASES["local-folder-one-gpu-no-digest"] | {"tensor_parallel_size": 16})
    export = offered(facts)["lws"]
    pod = export.documents[0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in pod["containers"][0]["volumeMounts"]
    assert "ReadOnlyMany" in next(n for n in export.notes if n.startswith("Weights:"))
