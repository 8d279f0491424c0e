"""Cluster exports (engines.export): each document parses, matches its target's published schema at the
version the export follows (tests/data/cluster, sources in its README), and runs the engine Hearth runs:
the same image digest, model revision and flags, never Hearth's own host, port or key. Plain data, no DB.

The engine's command line each target would run is rebuilt here from the target's own rules, read in its
source: production-stack's helm/templates/deployment-vllm-multi.yaml (0.1.12), KServe's
config/runtimes/kserve-vllmserver.yaml and MergeRuntimeContainers (0.20.0, runtime args then the
InferenceService's), and the LeaderWorkerSet leader's ``sh -c`` line.
"""

import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator, ValidationError
from jsonschema.validators import validator_for

from engines.adapters import vllm_args
from engines.export import ClusterExport, ClusterFacts, cluster_exports, k8s_name, registry_digest
from engines.export.facts import PLAN_FIELDS
from engines.planner import GpuPlan
from engines.stored_plan import StoredPlan
from engines.vllm_flags import VLLM_QUIET, argspec

DATA = Path(__file__).parent / "data" / "cluster"
DIGEST = "sha256:" + "3f" * 32
REVISION = "0e9e39f249a16976918f6564b8830bc894c89659"
BASE = {
    "served_model_name": "meta-llama/Llama-3.1-70B-Instruct",
    "engine": "vllm",
    "engine_version": "0.11.2",
    "image": "vllm/vllm-openai:v0.11.2",
    "image_digest": DIGEST,
    "tensor_parallel_size": 4,
    "gpu_memory_utilization": 0.92,
    "max_model_len": 32768,
    "max_num_seqs": 64,
    "gpus_per_node": 8,
    "model_repo_id": "meta-llama/Llama-3.1-70B-Instruct",
    "model_revision": REVISION,
    "gpu_indices": (0, 1, 2, 3, 4, 5, 6, 7),
    "kv_cache_dtype": "fp8",
    "extra_args": ("--enable-auto-tool-choice", "--tool-call-parser", "llama3_json", "--max-num-batched-tokens=4096"),
    "replica_count": 2,
    "ttft_slo_seconds": 0.5,
    "itl_slo_seconds": 0.05,
    "gpu_model": "NVIDIA H100 80GB HBM3",
    "gpu_memory_bytes": 80 * 1024**3,
    "weights_bytes": 141 * 1024**3,
}
# name → the facts that differ from BASE
CASES: dict[str, dict[str, Any]] = {
    "hf-tp4-two-replicas-fp8-kv": {},
    "local-folder-one-gpu-no-digest": {
        "served_model_name": "qwen2.5-7b",
        "model_repo_id": "",
        "model_revision": "",
        "model_path": "/srv/models/Qwen2.5-7B-Instruct",
        "image_digest": "",
        "tensor_parallel_size": 1,
        "gpu_indices": (0,),
        "replica_count": 1,
        "kv_cache_dtype": "auto",
        "extra_args": (),
        "ttft_slo_seconds": None,
        "itl_slo_seconds": None,
        "gpu_model": "",
    },
    "admin-set-tp-alias-and-dtype": {
        "tensor_parallel_size": 2,
        "gpu_indices": (0, 1),
        "replica_count": 1,
        "extra_args": ("-tp", "2", "--dtype", "bfloat16"),
    },
    "bf16-dtype-from-the-deployment": {"dtype": "bfloat16", "kv_cache_dtype": "fp8_e4m3"},
    "multi-node-tp16-on-8-gpu-nodes": {"tensor_parallel_size": 16, "gpu_indices": tuple(range(16))},
    "multi-node-tp8-on-6-gpu-nodes": {"tensor_parallel_size": 8, "gpus_per_node": 6, "replica_count": 1},
}


def facts_for(case: str) -> ClusterFacts:
    return ClusterFacts(**(BASE | CASES[case]))


def closed(node: Any) -> Any:
    """The schema as the cluster reads it: an object schema that lists its properties, and neither allows
    others nor preserves unknown fields, refuses a key it does not list. Kubernetes prunes such fields
    without a word (kubectl --validate=strict refuses them) and the chart's templates ignore them, so a
    misspelt key would otherwise pass here and do nothing there."""
    if isinstance(node, list):
        return [closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: closed(value) for key, value in node.items()}
    opened = "additionalProperties" in out or out.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in out and not opened:
        out["additionalProperties"] = False
    return out


def validator(filename: str) -> Any:
    schema = closed(json.loads((DATA / filename).read_text()))
    return validator_for(schema, default=Draft7Validator)(schema)


SCHEMAS = {
    "production-stack": validator("production-stack-0.1.12.values.schema.json"),
    "kserve": validator("kserve-0.20.0-inferenceservice.schema.json"),
    "lws": validator("lws-0.10.0-leaderworkerset.schema.json"),
}


def offered(facts: ClusterFacts) -> dict[str, ClusterExport]:
    return {export.target: export for export in cluster_exports(facts) if export.offered}


VLLM = argspec()


def canonical(name: str) -> str:
    """vLLM's own name for an option string (its parser's: ``-tp`` is ``--tensor-parallel-size``); others as given."""
    try:
        return VLLM.canonical(VLLM.dest_of(name))
    except KeyError:
        return name


def value_of(argv: list[str], flag: str) -> str | None:
    """What vLLM's parser ends with for ``flag``: the last occurrence wins, ``--f=v`` and ``--f v`` alike,
    ``_`` read as ``-`` and aliases mapped (vLLM's FlexibleArgumentParser); "" for a switch; None if absent."""
    found = None
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        if canonical(name) != flag:
            continue
        following = argv[i + 1] if i + 1 < len(argv) else "--"
        found = value if eq else ("" if following.startswith("-") and not following[1:2].isdigit() else following)
    return found


def helm_engine(export: ClusterExport) -> tuple[str, list[str], str]:
    """(image, argv, revision) as production-stack 0.1.12's deployment-vllm-multi.yaml renders the entry."""
    spec = export.documents[0]["servingEngineSpec"]["modelSpec"][0]
    config = spec["vllmConfig"]
    argv = ["vllm", "serve", spec["modelURL"], "--host", "0.0.0.0", "--port", "8000"]
    argv.append("--enable-prefix-caching" if config.get("enablePrefixCaching") else "--no-enable-prefix-caching")
    for field, flag in (
        ("maxModelLen", "--max-model-len"),
        ("dtype", "--dtype"),
        ("tensorParallelSize", "--tensor-parallel-size"),
        ("maxNumSeqs", "--max-num-seqs"),
        ("gpuMemoryUtilization", "--gpu_memory_utilization"),
    ):
        if field in config:
            argv += [flag, str(config[field])]
    argv += config.get("extraArgs", [])
    if spec.get("modelRevision"):
        argv += ["--revision", spec["modelRevision"]]
    return f"{spec['repository']}:{spec['tag']}", argv, spec.get("modelRevision", "")


def kserve_engine(export: ClusterExport) -> tuple[str, list[str], str]:
    """(image, argv, revision): kserve-vllmserver's args, then the InferenceService's; the revision is the
    one storageUri downloads (hf://owner/model:revision)."""
    isvc = export.documents[0]
    model = isvc["spec"]["predictor"]["model"]
    runtime = ["--port=8080", f"--served-model-name={isvc['metadata']['name']}", "--model=/mnt/models"]
    uri = model["storageUri"]
    revision = uri.rpartition(":")[2] if uri.startswith("hf://") else ""
    return model["image"], ["python", "-m", "vllm.entrypoints.openai.api_server", *runtime, *model["args"]], revision


def lws_engine(export: ClusterExport) -> tuple[str, list[str], str]:
    """(image, argv, revision) of the leader's vLLM server, the part of its ``sh -c`` line after the Ray head."""
    leader = export.documents[0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    argv = shlex.split(leader["command"][2].split("; ", 1)[1])
    return leader["image"], argv, value_of(argv, "--revision") or ""


ENGINES = {"production-stack": helm_engine, "kserve": kserve_engine, "lws": lws_engine}
TARGET_CASES = [(case, target) for case in CASES for target in ENGINES if target in offered(facts_for(case))]


def hearth_command(facts: ClusterFacts) -> list[str]:
    """What Hearth launches for the same facts (console.lifecycle._gpu_engine_spec's call)."""
    return vllm_args(
        version=facts.engine_version,
        model=facts.model_repo_id or "/models/m",
        revision=facts.model_revision or None,
        served_model_name=facts.served_model_name,
        port=8000,
        api_key="per-launch-key",
        plan=facts.gpu_plan(),
        user_args=facts.extra_args,
    ).command


@pytest.mark.parametrize(("case", "target"), TARGET_CASES)
def test_each_document_parses_back_and_matches_its_targets_schema(case: str, target: str) -> None:
    export = offered(facts_for(case))[target]
    parsed = list(yaml.safe_load_all(export.text))
    assert parsed == export.documents
    assert export.text.startswith("# ") and "Follows " in export.text.splitlines()[1]
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in SCHEMAS[target].iter_errors(parsed[0])]
    assert errors == []


@pytest.mark.parametrize(("case", "target"), TARGET_CASES)
def test_the_cluster_runs_hearths_image_revision_and_flags(case: str, target: str) -> None:
    facts = facts_for(case)
    image, argv, revision = ENGINES[target](offered(facts)[target])
    assert image == (f"vllm/vllm-openai:v0.11.2@{DIGEST}" if facts.image_digest else "vllm/vllm-openai:v0.11.2")
    assert revision == facts.model_revision
    hearth = hearth_command(facts)
    # The log switches (vllm_flags.VLLM_QUIET) are the appliance's: a cluster keeps its own logging.
    compared = {arg.partition("=")[0] for arg in hearth if arg.startswith("-")} - {
        "--model",
        "--host",
        "--port",
        "--revision",
        *(flag for flag, _, _ in VLLM_QUIET),
    }
    assert {flag: value_of(argv, canonical(flag)) for flag in compared} == {
        flag: value_of(hearth, canonical(flag)) for flag in compared
    }
    assert value_of(argv, "--tensor-parallel-size") == str(facts.tensor_parallel_size)
    assert value_of(argv, "--max-model-len") == str(facts.max_model_len)
    assert float(value_of(argv, "--gpu-memory-utilization") or 0) == facts.gpu_memory_utilization


@pytest.mark.parametrize(("case", "target"), TARGET_CASES)
def test_hearths_key_host_and_port_are_never_exported_and_a_secret_supplies_the_key(case: str, target: str) -> None:
    export = offered(facts_for(case))[target]
    _, argv, _ = ENGINES[target](export)
    assert value_of(argv, "--api-key") is None
    assert "per-launch-key" not in export.text and "0.0.0.0" not in export.text
    assert "secretKeyRef" in export.text or "vllmApiKey" in export.text
    assert f"kubectl create secret generic {facts_for(case).name}-engine" in " ".join(export.notes)


def test_the_extra_args_come_last_so_the_admins_flags_win() -> None:
    facts = facts_for("hf-tp4-two-replicas-fp8-kv")
    for target, engine in ENGINES.items():
        if target in offered(facts):
            _, argv, _ = engine(offered(facts)[target])
            end = len(argv) - (2 if target == "production-stack" else 0)  # the chart's --revision comes after
            assert argv[end - len(facts.extra_args) : end] == list(facts.extra_args), target


def test_a_multi_node_plan_yields_a_leader_worker_set_and_the_single_pod_targets_say_why_not() -> None:
    exports = {e.target: e for e in cluster_exports(facts_for("multi-node-tp16-on-8-gpu-nodes"))}
    lws, service = exports["lws"].documents
    template = lws["spec"]["leaderWorkerTemplate"]
    assert (lws["spec"]["replicas"], template["size"]) == (2, 2)
    for role in ("leaderTemplate", "workerTemplate"):
        assert template[role]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    selector = {"leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"], "role": "leader"}
    assert service["spec"]["selector"] == selector
    assert template["leaderTemplate"]["metadata"]["labels"]["role"] == "leader"
    for target in ("production-stack", "kserve"):
        assert not exports[target].offered
        assert "16 GPUs" in exports[target].notes[0] and "LeaderWorkerSet" in exports[target].notes[0]


def test_a_single_node_plan_offers_no_leader_worker_set_and_says_why() -> None:
    export = {e.target: e for e in cluster_exports(facts_for("hf-tp4-two-replicas-fp8-kv"))}["lws"]
    assert not export.offered and export.text == ""
    assert export.notes == [
        "Not needed: each replica needs 4 GPUs and a node has 8, so every replica fits one node. The Helm values "
        "and the InferenceService run its 2 replicas as pods that Kubernetes spreads over the nodes."
    ]


def test_replicas_beyond_one_node_are_pods_on_several_nodes_not_a_leader_worker_set() -> None:
    facts = ClusterFacts(**BASE | {"replica_count": 4})  # 4 × TP 4 = 16 GPUs, each replica on one 8-GPU node
    assert set(offered(facts)) == {"production-stack", "kserve"}
    assert offered(facts)["production-stack"].documents[0]["servingEngineSpec"]["modelSpec"][0]["replicaCount"] == 4


@pytest.mark.parametrize(
    ("tp", "per_node", "pods", "gpus_per_pod"),
    [(8, 6, 2, 4), (16, 8, 2, 8), (8, 3, 4, 2), (6, 4, 2, 3), (4, 8, 1, 4), (1, 1, 1, 1)],
)
def test_a_replicas_gpus_split_evenly_over_its_pods(tp: int, per_node: int, pods: int, gpus_per_pod: int) -> None:
    facts = ClusterFacts(**BASE | {"tensor_parallel_size": tp, "gpus_per_node": per_node})
    assert (facts.nodes_per_replica, facts.gpus_per_pod) == (pods, gpus_per_pod)


def test_the_schema_check_refuses_what_the_target_would_drop() -> None:
    export = offered(facts_for("hf-tp4-two-replicas-fp8-kv"))
    values = json.loads(json.dumps(export["production-stack"].documents[0]))
    values["servingEngineSpec"]["modelSpec"][0]["vllmConfig"]["maxModelLength"] = 32768  # misspelt
    isvc = json.loads(json.dumps(export["kserve"].documents[0]))
    isvc["spec"]["predictor"]["model"]["args"] = "--max-model-len 4096"  # a string, not a list
    for target, document in (("production-stack", values), ("kserve", isvc)):
        with pytest.raises(ValidationError):
            SCHEMAS[target].validate(document)


def test_the_model_and_its_place_on_the_cluster() -> None:
    local = offered(facts_for("local-folder-one-gpu-no-digest"))
    spec = local["production-stack"].documents[0]["servingEngineSpec"]["modelSpec"][0]
    assert (spec["modelURL"], "modelRevision" in spec) == ("/data/Qwen2.5-7B-Instruct", False)
    assert spec["pvcStorage"] == "156Gi"  # 141 GiB of tensors and a tenth more
    uri = local["kserve"].documents[0]["spec"]["predictor"]["model"]["storageUri"]
    assert uri == "pvc://qwen2-5-7b-model/Qwen2.5-7B-Instruct"
    hf = offered(facts_for("hf-tp4-two-replicas-fp8-kv"))
    uri = hf["kserve"].documents[0]["spec"]["predictor"]["model"]["storageUri"]
    assert uri == f"hf://meta-llama/Llama-3.1-70B-Instruct:{REVISION}"
    lws = offered(facts_for("multi-node-tp8-on-6-gpu-nodes"))["lws"]
    assert value_of(lws_engine(lws)[1], "--model") == "meta-llama/Llama-3.1-70B-Instruct"


def test_an_image_without_a_digest_goes_by_its_tag_and_says_so() -> None:
    export = offered(facts_for("local-folder-one-gpu-no-digest"))["kserve"]
    assert export.documents[0]["spec"]["predictor"]["model"]["image"] == "vllm/vllm-openai:v0.11.2"
    assert any(note.startswith("The image is not pinned") for note in export.notes)
    assert not any("not pinned" in n for n in offered(facts_for("hf-tp4-two-replicas-fp8-kv"))["kserve"].notes)


def test_slo_targets_and_the_planned_gpus_travel_as_annotations() -> None:
    isvc = offered(facts_for("hf-tp4-two-replicas-fp8-kv"))["kserve"].documents[0]
    assert isvc["metadata"]["annotations"] == {
        "hearth/served-model-name": "meta-llama/Llama-3.1-70B-Instruct",
        "hearth/engine": "vllm 0.11.2",
        "hearth/image": f"vllm/vllm-openai:v0.11.2@{DIGEST}",
        "hearth/planned-on": "NVIDIA H100 80GB HBM3, 80 GiB",
        "hearth/ttft-slo-seconds": "0.5",
        "hearth/itl-slo-seconds": "0.05",
    }
    local = offered(facts_for("local-folder-one-gpu-no-digest"))["kserve"].documents[0]
    assert not any("slo" in key for key in local["metadata"]["annotations"])


@pytest.mark.parametrize(
    ("pinned", "digest"),
    [
        (f"vllm/vllm-openai@{DIGEST}", DIGEST),  # Docker's RepoDigests[0], what Hearth stores
        (f"registry:5000/vllm/vllm-openai:v0.10.2@{DIGEST}", DIGEST),
        (DIGEST, ""),  # a local image's id: no registry serves it
        ("vllm/vllm-openai:v0.11.2", ""),
        ("", ""),
    ],
)
def test_registry_digest_reads_the_pinned_image(pinned: str, digest: str) -> None:
    assert registry_digest(pinned) == digest


@pytest.mark.parametrize(
    ("served", "name"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama-llama-3-1-8b-instruct"),
        ("qwen2.5-7b", "qwen2-5-7b"),
        ("7b_chat", "model-7b-chat"),
        ("x" * 60, "x" * 40),
        ("Mistral--Large//2411-", "mistral--large-2411"),
    ],
)
def test_k8s_names_are_dns_labels_that_leave_room_for_suffixes(served: str, name: str) -> None:
    assert k8s_name(served) == name


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"engine": "sglang"}, "this one runs sglang"),
        ({"model_revision": ""}, "has no pinned revision"),
        ({"model_path": "/srv/m"}, "one model source"),
        ({"image_digest": "sha256:abc"}, "is not a registry digest"),
        ({"gpu_memory_utilization": 1.5}, "is not a share"),
        ({"gpus_per_node": 0}, "must each be 1 or more"),
        ({"ttft_slo_seconds": 0.0}, "positive number of seconds"),
    ],
)
def test_facts_no_cluster_can_run_are_refused_with_the_reason(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterFacts(**BASE | changes)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"extra_args": ("--port", "9000")}, "Hearth sets these itself"),
        ({"engine_version": "0.4.0"}, "does not take --kv-cache-dtype fp8"),  # adapters' version gate
        ({"engine_version": "0.3.3"}, "older than the oldest"),
    ],
)
def test_flags_hearth_would_refuse_to_launch_are_refused_for_export_too(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cluster_exports(ClusterFacts(**BASE | changes))


def test_facts_are_read_from_the_stored_plan() -> None:
    plan = GpuPlan(
        fits=True,
        tensor_parallel_size=2,
        gpu_indices=[2, 3],
        gpu_memory_utilization=0.85,
        max_model_len=8192,
        max_num_seqs=32,
        kv_cache_dtype="auto",
        weights_bytes=16 * 1024**3,
        kv_bytes_per_token=131072,
        kv_capacity_tokens=200_000,
        typical_context=8192,
        concurrency_at_typical_context=24.4,
        split=None,
    )
    stored = json.loads(json.dumps(dataclasses.asdict(plan)))  # as Deployment.plan holds it
    other = {k: v for k, v in BASE.items() if k not in PLAN_FIELDS} | {"extra_args": ["--seed", "7"]}  # a JSON list
    facts = ClusterFacts.from_plan(StoredPlan.from_json(stored, "vllm"), **other)
    assert (facts.tensor_parallel_size, facts.gpu_indices, facts.max_model_len) == (2, (2, 3), 8192)
    assert facts.extra_args == ("--seed", "7")
    flags = facts.planned_flags(revision=False)
    assert flags[:4] == ["--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.85"]
    with pytest.raises(ValueError, match="no tensor_parallel_size"):
        ClusterFacts.from_plan(StoredPlan.from_json({"max_model_len": 4096}, "vllm-cpu"), **other)
