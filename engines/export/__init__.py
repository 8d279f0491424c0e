"""Cluster exports: one deployment's facts → the documents a Kubernetes cluster runs the same engine from.

Targets, each following the version its module names: vLLM production-stack Helm values (helm), a KServe
InferenceService on KServe's vLLM runtime (kserve), and a LeaderWorkerSet when one replica needs more GPUs
than a node has (lws). Every document carries the pinned image, the pinned model revision, the flags Hearth
launches with (built by engines.vllm_flags, not here) and the admin's; never the engine's key, nor the host
and port Hearth picks.

May import: engines.vllm_flags, engines.engine_version, engines.launch, engines.planner, the standard library
and PyYAML. Pure: no Django, no Docker, no database, no network.
"""

from engines.export.document import ClusterExport
from engines.export.facts import ClusterFacts, k8s_name, registry_digest
from engines.export.helm import helm_values
from engines.export.kserve import inference_service
from engines.export.lws import leader_worker_set

__all__ = ["ClusterExport", "ClusterFacts", "cluster_exports", "k8s_name", "registry_digest"]


def cluster_exports(facts: ClusterFacts) -> list[ClusterExport]:
    """Every target's export for ``facts``, offered or with the reason it is not: production-stack,
    KServe, LeaderWorkerSet. Raises ValueError as ClusterFacts.planned_flags does."""
    return [helm_values(facts), inference_service(facts), leader_worker_set(facts)]
