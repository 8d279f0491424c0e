"""What a cluster export is made from: one deployment's facts, as Hearth launched it.

``ClusterFacts`` holds them as plain values (the console fills it from the deployment, its model and its
stored plan); its methods derive what every target needs: a Kubernetes name, the image pinned by digest,
the flags Hearth passes (from engines.vllm_flags, never rebuilt here), and how many nodes one replica spans.
"""

import math
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from engines import vllm_flags
from engines.launch import EngineKind
from engines.planner import GpuPlan
from engines.stored_plan import StoredPlan

GIB = 1024**3
NAME_LIMIT = 40  # characters: a DNS-1035 label (63 at most) with room for the suffixes controllers add
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_NOT_NAME = re.compile(r"[^a-z0-9-]+")
PLAN_FIELDS = (
    "tensor_parallel_size",
    "gpu_indices",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "kv_cache_dtype",
)


def registry_digest(pinned: str) -> str:
    """The registry digest in an image Hearth pinned at launch (``Deployment.engine_image``, Docker's
    ``RepoDigests[0]``: ``vllm/vllm-openai@sha256:…``), "" when there is none: a bare ``sha256:…`` is a
    local image's id, which no registry serves."""
    digest = pinned.rpartition("@")[2] if "@" in pinned else ""
    return digest if _DIGEST.fullmatch(digest) else ""


def split_image(ref: str) -> tuple[str, str]:
    """``registry:5000/vllm/vllm-openai:v0.11.2@sha256:…`` → (``registry:5000/vllm/vllm-openai``,
    ``v0.11.2``); a reference without a tag means ``latest``, as Docker reads it."""
    name = ref.partition("@")[0]
    repository, colon, tag = name.rpartition(":")
    if not colon or "/" in tag:
        return name, "latest"
    return repository, tag


def k8s_name(text: str) -> str:
    """A Kubernetes object name from a served model name: lowercase letters, digits and '-', starting
    with a letter and at most NAME_LIMIT characters (a DNS-1035 label, which KServe requires of an
    InferenceService; production-stack also uses it as a label value, 63 at most).
    ``meta-llama/Llama-3.1-8B-Instruct`` → ``meta-llama-llama-3-1-8b-instruct``."""
    name = _NOT_NAME.sub("-", text.lower()).strip("-")
    if not name[:1].isalpha():
        name = f"model-{name}".rstrip("-")
    return name[:NAME_LIMIT].rstrip("-")


@dataclass(frozen=True)
class ClusterFacts:
    """One vLLM deployment as Hearth runs it.

    Model: a Hugging Face ``model_repo_id`` with its pinned commit ``model_revision``, or a local folder
    ``model_path`` on this box. Engine: ``engine`` (only "vllm" exports), ``engine_version`` ("0.11.2"),
    ``image`` as configured (``vllm/vllm-openai:v0.11.2``) and its registry ``image_digest``
    (``sha256:…``, "" when unknown). The plan, per replica: ``tensor_parallel_size`` (GPUs), its
    ``gpu_memory_utilization`` (0–1), ``max_model_len`` (tokens), ``max_num_seqs`` (sequences),
    ``kv_cache_dtype`` ("auto", "fp8", …) and ``dtype`` ("auto": the checkpoint's own); ``gpu_indices`` the
    GPUs of this box the deployment holds. ``extra_args`` the engine flags the admin added;
    ``replica_count`` engines at once; ``ttft_slo_seconds`` / ``itl_slo_seconds`` the targets where set
    (seconds); ``gpu_model`` the NVML name of the GPUs it was planned on ("NVIDIA H100 80GB HBM3", never the
    console's sentence about them) and ``gpu_memory_bytes`` the total memory NVML reports for each;
    ``weights_bytes`` the checkpoint's tensor bytes (0: unknown). ``gpus_per_node``: the GPUs one cluster node has.
    ``tool_call_parser`` / ``reasoning_parser``: the parsers it runs with (None: none).

    Raises ValueError, with the reason, for facts no cluster document can be made from.
    """

    served_model_name: str
    engine: str
    engine_version: str
    image: str
    image_digest: str
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    gpus_per_node: int
    model_repo_id: str = ""
    model_revision: str = ""
    model_path: str = ""
    gpu_indices: tuple[int, ...] = ()
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    extra_args: tuple[str, ...] = ()
    replica_count: int = 1
    ttft_slo_seconds: float | None = None
    itl_slo_seconds: float | None = None
    gpu_model: str = ""
    gpu_memory_bytes: int = 0
    weights_bytes: int = 0
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None

    def __post_init__(self) -> None:
        if problems := self._problems():
            raise ValueError(" ".join(problems))

    @classmethod
    def from_plan(cls, plan: StoredPlan, **facts: Any) -> "ClusterFacts":
        """Facts from a deployment's stored plan (its PLAN_FIELDS) and the rest by keyword (``extra_args``
        may be the stored list). Raises ValueError as the constructor does, and for a plan not made for GPUs."""
        if plan.gpu is None:
            raise ValueError(f"The deployment's plan has no {', '.join(PLAN_FIELDS)}: it was not planned for GPUs.")
        values = {name: getattr(plan, name) for name in PLAN_FIELDS}
        facts["extra_args"] = tuple(facts.get("extra_args", ()))
        return cls(**values, **facts)

    def _problems(self) -> list[str]:
        problems = []
        if self.engine != EngineKind.VLLM:
            problems.append(
                f"Cluster export covers vLLM deployments (production-stack, KServe's vLLM runtime and vLLM's "
                f"LeaderWorkerSet recipe all run vLLM); this one runs {self.engine}."
            )
        if bool(self.model_repo_id) == bool(self.model_path):
            problems.append("A deployment exports with one model source: a Hugging Face repo id or a local folder.")
        if self.model_repo_id and not self.model_revision:
            problems.append(f"{self.model_repo_id} has no pinned revision; a cluster must load the same commit.")
        if not self.served_model_name or not self.image:
            problems.append("A deployment exports with a served model name and an engine image.")
        if self.image_digest and not _DIGEST.fullmatch(self.image_digest):
            problems.append(f"{self.image_digest!r} is not a registry digest (sha256: and 64 hex digits).")
        if min(self.tensor_parallel_size, self.replica_count, self.gpus_per_node, self.max_model_len) < 1:
            problems.append("Tensor parallel size, replicas, GPUs per node and max_model_len must each be 1 or more.")
        if not 0 < self.gpu_memory_utilization <= 1:
            problems.append(f"gpu_memory_utilization {self.gpu_memory_utilization} is not a share in (0, 1].")
        if any(slo is not None and slo <= 0 for slo in (self.ttft_slo_seconds, self.itl_slo_seconds)):
            problems.append("An SLO target is a positive number of seconds.")
        return problems

    @property
    def name(self) -> str:
        """The Kubernetes name every document uses (k8s_name of the served model name)."""
        return k8s_name(self.served_model_name)

    @property
    def pinned_image(self) -> str:
        """The image as the cluster pulls it: ``repository:tag@sha256:…`` when the digest is known (the
        digest decides; the tag stays for people), else the configured reference."""
        repository, tag = split_image(self.image)
        return f"{repository}:{tag}@{self.image_digest}" if self.image_digest else f"{repository}:{tag}"

    @property
    def model_folder(self) -> str:
        """The local model's folder name, the place it takes on the cluster's volume ("" for a repo)."""
        return PurePosixPath(self.model_path).name if self.model_path else ""

    def planned_flags(self, revision: bool = True) -> list[str]:
        """The flags Hearth adds to vLLM's command for this plan, as engines.vllm_flags builds them for
        ``engine_version`` (``--revision`` first when ``revision`` and the model is a repo). Raises
        ValueError as vllm_flags.gpu_flags does (an engine too old, a flag Hearth owns in
        ``extra_args``, a KV cache dtype the version does not take)."""
        return vllm_flags.gpu_flags(
            version=self.engine_version,
            revision=self.model_revision if revision and self.model_repo_id else None,
            plan=self.gpu_plan(),
            user_args=self.extra_args,
            tool_call_parser=self.tool_call_parser,
            reasoning_parser=self.reasoning_parser,
        )

    def user_sets(self, flag: str) -> bool:
        """Whether the admin's ``extra_args`` set ``flag`` (one of vLLM's option strings), as vLLM
        ``engine_version``'s parser reads them: aliases, prefixes and ``_`` spellings included. Raises
        ValueError as vllm_flags.user_flags does."""
        return vllm_flags.user_flags(self.extra_args, self.engine_version).sets(flag)

    def dtype_flags(self) -> list[str]:
        """``--dtype`` with the deployment's dtype, unless it is vLLM's default "auto" (what Hearth launches
        with) or the admin set it among ``extra_args``."""
        return [] if self.dtype == "auto" or self.user_sets("--dtype") else ["--dtype", self.dtype]

    @property
    def gpus_per_pod(self) -> int:
        """GPUs each pod of one replica holds: the largest divisor of the tensor parallel size that one node
        has, so the tensor-parallel ranks split evenly across the replica's pods."""
        tp = self.tensor_parallel_size
        return max(d for d in range(1, min(tp, self.gpus_per_node) + 1) if tp % d == 0)

    @property
    def nodes_per_replica(self) -> int:
        """Pods (one per node) one replica spans: 1 when its GPUs fit one node."""
        return math.ceil(self.tensor_parallel_size / self.gpus_per_pod)

    def volume_size(self) -> str:
        """Storage for the model on the cluster: the checkpoint's bytes and a tenth more for tokenizer and
        config files, in whole GiB (a Kubernetes quantity); "" when the checkpoint's size is unknown."""
        return f"{math.ceil(self.weights_bytes * 1.1 / GIB)}Gi" if self.weights_bytes else ""

    def gpu_plan(self) -> GpuPlan:
        """The plan as engines.vllm_flags reads it. Only the fields it reads carry facts; the sizing outputs
        (capacity, split, reasons) are not part of the export, so they are zero here."""
        return GpuPlan(
            fits=True,
            tensor_parallel_size=self.tensor_parallel_size,
            gpu_indices=list(self.gpu_indices),
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_model_len=self.max_model_len,
            max_num_seqs=self.max_num_seqs,
            kv_cache_dtype=self.kv_cache_dtype,
            weights_bytes=self.weights_bytes,
            kv_bytes_per_token=0,
            kv_capacity_tokens=0,
            typical_context=0,
            concurrency_at_typical_context=0.0,
            split=None,
        )
