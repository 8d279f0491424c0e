"""vLLM production-stack Helm values for a deployment: one ``servingEngineSpec.modelSpec`` entry.

Follows the vllm-stack chart 0.1.12, read at vllm-project/production-stack @ 66b60661 (tag
vllm-stack-0.1.12): helm/values.schema.json for the shape, helm/templates/deployment-vllm-multi.yaml and
helm/templates/_helpers.tpl for what each value becomes:

- the engine runs ``vllm serve <modelURL> --host 0.0.0.0 --port 8000`` from image ``repository:tag``, so
  the tag carries the digest (``v0.11.2@sha256:…``, which the digest decides);
- ``vllmConfig``: maxModelLen, tensorParallelSize, maxNumSeqs, gpuMemoryUtilization and dtype become
  their flags, then ``extraArgs`` as they are; ``modelRevision`` becomes ``--revision``;
- the template always passes a prefix-caching switch: ``--enable-prefix-caching`` when
  ``enablePrefixCaching`` is true, ``--no-enable-prefix-caching`` otherwise;
- ``requestCPU`` and ``requestMemory`` are required; ``requestGPU`` becomes ``nvidia.com/gpu``;
- ``servingEngineSpec.vllmApiKey`` as {secretName, secretKey} becomes env VLLM_API_KEY of the engines
  and the router; ``hf_token`` as {secretName, secretKey} becomes env HF_TOKEN;
- ``pvcStorage`` makes a PVC mounted at /data, which is then HF_HOME;
- ``servingEngineSpec.startupProbe`` becomes every engine's startup probe (helpers ``chart.probes``): the
  chart's default allows 15 + 60 × 10 s, about ten minutes, for the engine's own download and load; the export
  sizes it from the checkpoint's bytes (engines.export.document.startup_seconds);
- ``modelSpec.nodeSelectorTerms`` become the pods' required node affinity (engines.export.node_labels);
- ``routerSpec`` (helm/templates/deployment-router.yaml): the router runs ``repository:tag`` (the chart's
  default tag is ``latest``) with ``--routing-logic routingLogic`` (default ``roundrobin``; ``prefixaware``
  sends requests that share a prefix to the same engine, as Hearth's gateway does). Each chart release's
  workflow (.github/workflows/scheduled-release.yml, job release-docker) pushes the router image as
  ``lmcache/lmstack-router:v<chart version>``, so the export pins ``v0.1.12``.
"""

from typing import Any

from engines.export.document import (
    ENGINE_KEY,
    HF_TOKEN,
    REQUEST_CPU,
    REQUEST_MEMORY,
    ClusterExport,
    annotations,
    below,
    common_notes,
    node_selector,
    refused,
    secret_name,
    startup_note,
    startup_probe,
)
from engines.export.facts import ClusterFacts, split_image

TARGET = "production-stack"
TITLE = "vLLM production-stack Helm values"
CHART_VERSION = "0.1.12"
FOLLOWS = (
    f"the vllm-stack chart {CHART_VERSION} (vllm-project/production-stack @ 66b60661, "
    "helm/values.schema.json and helm/templates/deployment-vllm-multi.yaml)"
)
CHART_REPO = "https://vllm-project.github.io/production-stack"  # production-stack's README
VOLUME = "/data"  # where the chart mounts pvcStorage
ROUTER_IMAGE = "lmcache/lmstack-router"  # values.yaml's routerSpec.repository
ROUTER_TAG = f"v{CHART_VERSION}"  # pushed by the chart's release workflow (module docstring)
ROUTING = "prefixaware"
ENGINE_PORT = 8000  # the chart's containerPort for the engines
# vLLM's V1 engine, the default from 0.8, caches prefixes unless told not to; the chart's template speaks
# current vLLM (``vllm serve``, ``--no-enable-prefix-caching``, ``--gpu_memory_utilization``).
CURRENT_VLLM = "0.8.0"
# Planned flag → (vllmConfig field, its type); the chart's template turns each field back into the flag.
VLLM_CONFIG = {
    "--tensor-parallel-size": ("tensorParallelSize", int),
    "--gpu-memory-utilization": ("gpuMemoryUtilization", float),
    "--max-model-len": ("maxModelLen", int),
    "--max-num-seqs": ("maxNumSeqs", int),
}


def helm_values(facts: ClusterFacts) -> ClusterExport:
    """The values file for ``helm install … vllm/vllm-stack --version 0.1.12 -f FILE``: one modelSpec
    entry with the pinned image, the model at its pinned revision, the plan's vLLM settings, Hearth's
    other flags and the admin's in extraArgs, the replica count and one GPU per tensor-parallel rank.
    Not offered when one replica needs more GPUs than a node has. Raises ValueError as
    ClusterFacts.planned_flags does."""
    if facts.nodes_per_replica > 1:
        return refused(
            TARGET,
            TITLE,
            FOLLOWS,
            (
                f"One replica needs {facts.tensor_parallel_size} GPUs (tensor parallel {facts.tensor_parallel_size}) "
                f"and a node has {facts.gpus_per_node}: the chart runs each replica as one pod, which no node can "
                f"hold. Use the LeaderWorkerSet export, or the chart's raySpec (vLLM on a KubeRay cluster)."
            ),
        )
    probe = startup_probe(facts, bool(facts.model_repo_id), 15, 10)
    values = {
        "servingEngineSpec": {
            "vllmApiKey": {"secretName": secret_name(facts), "secretKey": ENGINE_KEY},
            "modelSpec": [_model_spec(facts)],
            "startupProbe": probe | {"httpGet": {"path": "/health", "port": ENGINE_PORT}},
        },
        "routerSpec": {
            "repository": ROUTER_IMAGE,
            "tag": ROUTER_TAG,
            "imagePullPolicy": "IfNotPresent",
            "routingLogic": ROUTING,
        },
    }
    return ClusterExport(TARGET, TITLE, FOLLOWS, f"{facts.name}-values.yaml", [values], _notes(facts))


def _model_spec(facts: ClusterFacts) -> dict[str, Any]:
    repository, tag = split_image(facts.image)
    spec: dict[str, Any] = {
        "name": facts.name,
        "annotations": annotations(facts),
        "repository": repository,
        "tag": f"{tag}@{facts.image_digest}" if facts.image_digest else tag,
        "modelURL": facts.model_repo_id or f"{VOLUME}/{facts.model_folder}",
    }
    if facts.model_repo_id:
        spec["modelRevision"] = facts.model_revision
    spec |= {
        "replicaCount": facts.replica_count,
        "requestCPU": REQUEST_CPU,
        "requestMemory": REQUEST_MEMORY,
        "requestGPU": facts.tensor_parallel_size,
    }
    if size := facts.volume_size():
        spec["pvcStorage"] = size
    if facts.model_repo_id:
        spec["hf_token"] = {"secretName": secret_name(facts), "secretKey": HF_TOKEN}
    spec["vllmConfig"] = _vllm_config(facts)
    if selector := node_selector(facts):
        terms = [{"key": key, "operator": "In", "values": [value]} for key, value in selector.items()]
        spec["nodeSelectorTerms"] = [{"matchExpressions": terms}]
    return spec


def _pairs(flags: list[str]) -> list[tuple[str, str | None]]:
    """(flag, value) of a planned flag list, None for a switch (``--enable-prompt-tokens-details``): a flag
    whose next item is another flag, or nothing."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(flags):
        value = flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else None
        pairs.append((flags[i], value))
        i += 1 if value is None else 2
    return pairs


def _vllm_config(facts: ClusterFacts) -> dict[str, Any]:
    """The plan's flags as the chart's fields; the flags it has no field for (the KV cache dtype), the
    served model name and the admin's flags go to extraArgs, in that order."""
    config: dict[str, Any] = {"enablePrefixCaching": True}
    rest: list[str] = []
    flags = facts.planned_flags(revision=False)  # the chart passes modelRevision as --revision itself
    for flag, value in _pairs(flags):
        if flag in VLLM_CONFIG and value is not None:
            field, kind = VLLM_CONFIG[flag]
            config[field] = kind(value)
        else:
            rest += [flag] if value is None else [flag, value]
    if not facts.user_sets("--dtype"):
        config["dtype"] = facts.dtype
    config["extraArgs"] = [*rest, "--served-model-name", facts.served_model_name, *facts.extra_args]
    return config


def _notes(facts: ClusterFacts) -> list[str]:
    notes = [
        f"Install: helm repo add vllm {CHART_REPO}; helm install {facts.name} vllm/vllm-stack --version "
        f"{CHART_VERSION} -f {facts.name}-values.yaml"
    ]
    notes += common_notes(facts)
    if facts.model_path:
        notes.append(
            f"The model is a local folder ({facts.model_path}): copy it into the chart's volume "
            f"(PVC <release>-{facts.name}-storage-claim, mounted at {VOLUME}) as {facts.model_folder}/."
        )
    notes.append(startup_note(facts, bool(facts.model_repo_id)))
    notes.append(
        f"The router runs {ROUTER_IMAGE}:{ROUTER_TAG}, the image released with chart {CHART_VERSION} (replace the "
        f"tag with its digest to pin it for good), with routingLogic {ROUTING}: requests that share a prefix go to "
        f"the engine that has it cached, as Hearth routes them."
    )
    if not facts.volume_size():
        notes.append("The checkpoint's size is unknown here, so no pvcStorage is set; set one to keep the model.")
    notes.append(
        "enablePrefixCaching is true: the chart passes a prefix-caching switch either way, and on keeps what "
        "vLLM does by default (V1, from 0.8) and what prefix-affinity routing relies on; an admin's "
        "--no-enable-prefix-caching among extraArgs still wins, coming later."
    )
    if below(facts, CURRENT_VLLM):
        notes.append(
            f"This deployment runs vLLM {facts.engine_version}; the chart's template is written for current "
            f"vLLM (vllm serve, --no-enable-prefix-caching, underscore spellings): use an image of vLLM "
            f"{CURRENT_VLLM} or newer there."
        )
    return notes
