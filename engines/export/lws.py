"""A LeaderWorkerSet for a deployment whose replica needs more GPUs than one node has.

Follows LeaderWorkerSet 0.10.0, read at kubernetes-sigs/lws @ 2161f38f (tag v0.10.0):
config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml, the leaderworkerset.x-k8s.io/v1 schema;
and vLLM's LWS recipe, vllm-project/vllm @ 051f9b87 docs/deployment/frameworks/lws.md (the same manifest
as lws docs/examples/vllm/GPU/lws.yaml at v0.10.0). One group is one replica: its leader pod starts a Ray
head (``multi-node-serving.sh leader --ray_cluster_size=$(LWS_GROUP_SIZE)``, a script in the vllm-openai
image) and then vLLM's OpenAI server on 8080; each worker pod joins it (``… worker
--ray_address=$(LWS_LEADER_ADDRESS)``); LWS sets both variables, and Kubernetes expands ``$(VAR)`` in a
command. A ClusterIP Service selects the leaders.

Every pod of a group loads the weights itself (each Ray worker reads its shard from the model path on its own
node), so every pod mounts one weights volume the user provides, the PersistentVolumeClaim ``<name>-model``
(or a hostPath in its place), at /models: a local model's folder lies there, and a Hugging Face model is
downloaded there once (HF_HOME) rather than into each pod's ephemeral storage.
"""

import shlex
from typing import Any

from engines.export.document import (
    HF_TOKEN,
    REQUEST_CPU,
    REQUEST_MEMORY,
    ClusterExport,
    annotations,
    common_notes,
    engine_env,
    node_selector,
    refused,
    secret_env,
)
from engines.export.facts import ClusterFacts

TARGET = "lws"
TITLE = "LeaderWorkerSet (vLLM over Ray, one group per replica)"
LWS_VERSION = "0.10.0"
FOLLOWS = (
    f"LeaderWorkerSet {LWS_VERSION} (kubernetes-sigs/lws @ 2161f38f, the leaderworkerset.x-k8s.io/v1 CRD) "
    "and vLLM's LWS recipe (vllm-project/vllm @ 051f9b87, docs/deployment/frameworks/lws.md)"
)
API_VERSION = "leaderworkerset.x-k8s.io/v1"
SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"
PORT = 8080
SHM = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "15Gi"}}  # as vLLM's recipe
MODELS = "/models"  # where the weights volume is mounted in every pod
HF_HOME = f"{MODELS}/huggingface"  # a Hugging Face model's download, shared by the group's pods
SHM_PATH = "/dev/shm"  # noqa: S108 - the pod's shared memory (NCCL), an emptyDir of its own


def leader_worker_set(facts: ClusterFacts) -> ClusterExport:
    """A LeaderWorkerSet of ``replica_count`` groups, each ``nodes_per_replica`` pods of ``gpus_per_pod``
    GPUs, running the pinned image with the plan's tensor parallel size across the group, and a Service
    for the leaders. Offered only when one replica needs more GPUs than a node has (tensor parallel size
    beyond ``gpus_per_node``); replicas that each fit a node are ordinary pods, which the other exports
    make. Raises ValueError as ClusterFacts.planned_flags does."""
    tp, per_node = facts.tensor_parallel_size, facts.gpus_per_node
    if facts.nodes_per_replica == 1:
        return refused(
            TARGET,
            TITLE,
            FOLLOWS,
            (
                f"Not needed: each replica needs {tp} GPU{'s' if tp > 1 else ''} and a node has {per_node}, so "
                f"every replica fits one node. The Helm values and the InferenceService run its "
                f"{facts.replica_count} replica{'s' if facts.replica_count > 1 else ''} as pods that Kubernetes "
                f"spreads over the nodes."
            ),
        )
    template = {
        "size": facts.nodes_per_replica,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": {"metadata": {"labels": {"role": "leader"}}, "spec": _pod(facts, leader=True)},
        "workerTemplate": {"spec": _pod(facts, leader=False)},
    }
    lws = {
        "apiVersion": API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": facts.name, "annotations": annotations(facts)},
        "spec": {"replicas": facts.replica_count, "leaderWorkerTemplate": template},
    }
    return ClusterExport(
        TARGET, TITLE, FOLLOWS, f"{facts.name}-leaderworkerset.yaml", [lws, _service(facts)], _notes(facts)
    )


def server_command(facts: ClusterFacts) -> list[str]:
    """The leader's vLLM server: the recipe's program and port, the model and served name, then the same
    flags Hearth launches with (engines.vllm_flags) and the admin's."""
    model = facts.model_repo_id or f"{MODELS}/{facts.model_folder}"
    return [
        "python3",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--port",
        str(PORT),
        "--model",
        model,
        "--served-model-name",
        facts.served_model_name,
        *facts.planned_flags(),
        *facts.dtype_flags(),
        *facts.extra_args,
    ]


def _pod(facts: ClusterFacts, leader: bool) -> dict[str, Any]:
    if leader:
        script = f"bash {SCRIPT} leader --ray_cluster_size=$(LWS_GROUP_SIZE); {shlex.join(server_command(facts))}"
        env = engine_env(facts)
    else:
        script = f"bash {SCRIPT} worker --ray_address=$(LWS_LEADER_ADDRESS)"
        env = [secret_env(facts, HF_TOKEN, optional=True)] if facts.model_repo_id else []
    if facts.model_repo_id:
        env = [*env, {"name": "HF_HOME", "value": HF_HOME}]
    read_only = bool(facts.model_path)  # a Hugging Face model is written there by its first download
    mounts = [{"name": "dshm", "mountPath": SHM_PATH}, {"name": "model", "mountPath": MODELS, "readOnly": read_only}]
    claim = {"claimName": f"{facts.name}-model", "readOnly": read_only}
    volumes: list[dict[str, Any]] = [SHM, {"name": "model", "persistentVolumeClaim": claim}]
    container: dict[str, Any] = {
        "name": "vllm-leader" if leader else "vllm-worker",
        "image": facts.pinned_image,
        "command": ["sh", "-c", script],
        **({"env": env} if env else {}),
        "resources": {
            "limits": {"nvidia.com/gpu": str(facts.gpus_per_pod)},
            "requests": {"cpu": str(REQUEST_CPU), "memory": REQUEST_MEMORY},
        },
        "volumeMounts": mounts,
    }
    if leader:
        container["ports"] = [{"containerPort": PORT}]
        container["readinessProbe"] = {"tcpSocket": {"port": PORT}, "initialDelaySeconds": 15, "periodSeconds": 10}
    pod: dict[str, Any] = {"containers": [container], "volumes": volumes}
    if selector := node_selector(facts):
        pod["nodeSelector"] = selector
    return pod


def _service(facts: ClusterFacts) -> dict[str, Any]:
    """The recipe's ClusterIP Service in front of each group's leader."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{facts.name}-leader"},
        "spec": {
            "ports": [{"name": "http", "port": PORT, "protocol": "TCP", "targetPort": PORT}],
            "selector": {"leaderworkerset.sigs.k8s.io/name": facts.name, "role": "leader"},
            "type": "ClusterIP",
        },
    }


def _notes(facts: ClusterFacts) -> list[str]:
    notes = [
        f"Apply with kubectl apply -f {facts.name}-leaderworkerset.yaml on a cluster with LeaderWorkerSet "
        f"{LWS_VERSION} or newer: {facts.replica_count} group(s) of {facts.nodes_per_replica} pods, "
        f"{facts.gpus_per_pod} GPUs each, serving on the Service {facts.name}-leader port {PORT}."
    ]
    notes += common_notes(facts)
    notes.append(
        f"Tensor parallel {facts.tensor_parallel_size} stays as Hearth planned it, now across nodes. vLLM's "
        f"distributed-serving guide prefers tensor parallel within a node and pipeline parallel across nodes: "
        f"--tensor-parallel-size {facts.gpus_per_pod} --pipeline-parallel-size {facts.nodes_per_replica} "
        f"is the usual alternative, on fast interconnects either way."
    )
    notes.append(_weights_note(facts))
    return notes


def _weights_note(facts: ClusterFacts) -> str:
    """Where the weights live: the volume every pod mounts, which the user provides."""
    size = f" of at least {facts.volume_size()}" if facts.volume_size() else ""
    where = (
        f"Weights: every pod of a group loads the model, from one volume you provide before applying: the "
        f"PersistentVolumeClaim {facts.name}-model{size}, mounted at {MODELS} in every pod"
    )
    if facts.model_path:
        return (
            f"{where} (ReadOnlyMany). The model is a local folder ({facts.model_path}): put it there as "
            f"{facts.model_folder}/. Nodes that each hold a copy can use a hostPath volume named model instead."
        )
    return (
        f"{where} (ReadWriteMany: NFS, CephFS or a cloud file store). The first pod downloads "
        f"{facts.model_repo_id} at {facts.model_revision[:12]} into it (HF_HOME={HF_HOME}) and the others find "
        f"it there. Nodes that each hold a copy in that layout can use a hostPath volume named model instead."
    )
