"""A KServe InferenceService for a deployment, on KServe's vLLM serving runtime.

Follows KServe 0.20.0, read at kserve/kserve @ 1fb78105 (tag v0.20.0):

- config/crd/full/serving.kserve.io_inferenceservices.yaml: the serving.kserve.io/v1beta1 schema;
- config/runtimes/kserve-vllmserver.yaml: the ClusterServingRuntime ``kserve-vllmserver`` for model format
  ``vLLM`` (added by kserve#4769). It runs ``python -m vllm.entrypoints.openai.api_server --port=8080
  --served-model-name={{.Name}} --model=/mnt/models`` from ``vllm/vllm-openai``, probes ``GET /v1/models``
  on 8080 and mounts /dev/shm;
- pkg/controller/v1beta1/inferenceservice/utils/utils.go: ``MergeRuntimeContainers`` appends the
  InferenceService's args to the runtime's (argparse keeps the last ``--served-model-name``) and patches
  the rest of the container over the runtime's with a strategic merge (pkg/utils/container_merge.go,
  ``MergeContainerWithPatch``): maps such as ``resources.limits`` merge key by key, so the runtime's
  ``limits: {cpu: 1, memory: 2Gi}`` stay unless the export sets both; requests above them are refused. So the
  export sets limits equal to its requests for CPU, memory and GPUs (a Guaranteed pod). ``UpdateImageTag``
  leaves an image with a digest as it is;
- python/storage/kserve_storage/kserve_storage.py: ``storageUri: hf://owner/model:revision`` downloads that
  commit to /mnt/models before the engine starts (an init container: the startup probe covers the load only);
- the predictor takes a pod's ``nodeSelector`` (the GPU feature discovery labels of engines.export.node_labels).
"""

from engines.export.document import (
    ENGINE_KEY,
    HF_TOKEN,
    REQUEST_CPU,
    REQUEST_MEMORY,
    ClusterExport,
    annotations,
    common_notes,
    node_selector,
    refused,
    secret_env,
    startup_note,
    startup_probe,
)
from engines.export.facts import ClusterFacts

TARGET = "kserve"
TITLE = "KServe InferenceService (vLLM runtime)"
KSERVE_VERSION = "0.20.0"
FOLLOWS = (
    f"KServe {KSERVE_VERSION} (kserve/kserve @ 1fb78105: the v1beta1 InferenceService CRD and the "
    "kserve-vllmserver runtime, config/runtimes/kserve-vllmserver.yaml)"
)
API_VERSION = "serving.kserve.io/v1beta1"
RUNTIME = "kserve-vllmserver"
MODEL_FORMAT = "vLLM"
RUNTIME_PORT = 8080  # the runtime's --port
# The runtime probes /v1/models, which vLLM answers 401 without the key once VLLM_API_KEY is set (its key
# check covers /v1, see engines.adapters); /health is outside it. Timings as the runtime's own probes.
READINESS = {
    "httpGet": {"path": "/health", "port": RUNTIME_PORT},
    "periodSeconds": 10,
    "timeoutSeconds": 5,
    "failureThreshold": 3,
}
STARTUP_DELAY = 30  # seconds, as the runtime's own startup probe
STARTUP_PERIOD = 30


def inference_service(facts: ClusterFacts) -> ClusterExport:
    """An InferenceService whose predictor runs the deployment's image (pinned) on the kserve-vllmserver
    runtime: the model at its pinned revision through storageUri, Hearth's flags and the admin's as args,
    the replica count fixed (min = max), one GPU per tensor-parallel rank. Not offered when one replica
    needs more GPUs than a node has. Raises ValueError as ClusterFacts.planned_flags does."""
    if facts.nodes_per_replica > 1:
        return refused(
            TARGET,
            TITLE,
            FOLLOWS,
            (
                f"One replica needs {facts.tensor_parallel_size} GPUs and a node has {facts.gpus_per_node}: the "
                f"vLLM runtime runs each replica as one pod, which no node can hold. Use the LeaderWorkerSet "
                f"export, or KServe's kserve-huggingfaceserver-multinode runtime with a workerSpec."
            ),
        )
    resources = {"cpu": str(REQUEST_CPU), "memory": REQUEST_MEMORY, "nvidia.com/gpu": str(facts.tensor_parallel_size)}
    startup = {"httpGet": {"path": "/health", "port": RUNTIME_PORT}, "timeoutSeconds": 10}
    model = {
        "modelFormat": {"name": MODEL_FORMAT},
        "runtime": RUNTIME,
        "storageUri": _storage_uri(facts),
        "image": facts.pinned_image,
        "args": _args(facts),
        "env": [secret_env(facts, ENGINE_KEY)],
        "resources": {"requests": resources, "limits": dict(resources)},
        "readinessProbe": READINESS,
        "startupProbe": startup | startup_probe(facts, False, STARTUP_DELAY, STARTUP_PERIOD),
    }
    predictor = {"minReplicas": facts.replica_count, "maxReplicas": facts.replica_count, "model": model}
    if selector := node_selector(facts):
        predictor["nodeSelector"] = selector
    document = {
        "apiVersion": API_VERSION,
        "kind": "InferenceService",
        "metadata": {"name": facts.name, "annotations": annotations(facts)},
        "spec": {"predictor": predictor},
    }
    return ClusterExport(TARGET, TITLE, FOLLOWS, f"{facts.name}-inferenceservice.yaml", [document], _notes(facts))


def _storage_uri(facts: ClusterFacts) -> str:
    if facts.model_repo_id:
        return f"hf://{facts.model_repo_id}:{facts.model_revision}"
    return f"pvc://{facts.name}-model/{facts.model_folder}"


def _args(facts: ClusterFacts) -> list[str]:
    """After the runtime's own: the served model name clients know, the plan's flags (the revision is in
    storageUri, so the engine loads a folder), the dtype when set, then the admin's flags."""
    return [
        f"--served-model-name={facts.served_model_name}",
        *facts.planned_flags(revision=False),
        *facts.dtype_flags(),
        *facts.extra_args,
    ]


def _notes(facts: ClusterFacts) -> list[str]:
    notes = [
        f"Apply with kubectl apply -f {facts.name}-inferenceservice.yaml on KServe {KSERVE_VERSION} or newer, "
        f"whose {RUNTIME} runtime serves the {MODEL_FORMAT} model format."
    ]
    notes += common_notes(facts)
    if facts.model_repo_id:
        notes.append(
            f"KServe's storage initializer downloads the model; for a gated one give it the token: a "
            f"ClusterStorageContainer for hf:// whose env reads {HF_TOKEN} from the Secret (KServe's "
            f"text-generation guide)."
        )
    else:
        notes.append(
            f"The model is a local folder ({facts.model_path}): put it on a PVC named {facts.name}-model as "
            f"{facts.model_folder}/, which storageUri names."
        )
    notes.append("The probes use /health: the runtime's /v1/models answers 401 once the engine has a key.")
    notes.append(
        f"Limits equal the requests ({REQUEST_CPU} CPUs, {REQUEST_MEMORY}, {facts.tensor_parallel_size} GPUs): KServe "
        f"merges the {RUNTIME} runtime's container into this one key by key, and the runtime's limits (1 CPU, 2Gi) "
        f"would otherwise stay under these requests, which Kubernetes refuses."
    )
    notes.append(startup_note(facts, False))
    return notes
