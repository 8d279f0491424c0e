"""A cluster export's result, and what every target shares: the Secret the engine's key comes from, the
annotations that carry Hearth's facts, the notes that go with the file, and YAML written by PyYAML."""

import math
import textwrap
from dataclasses import dataclass
from typing import Any

import yaml

from engines.engine_version import parse_version
from engines.export.facts import GIB, ClusterFacts
from engines.export.node_labels import gpu_node_labels

ENGINE_KEY = "VLLM_API_KEY"  # vLLM reads its API key from this variable (vllm/envs.py); also the Secret's key
HF_TOKEN = "HF_TOKEN"  # noqa: S105 - the name of huggingface_hub's token variable (and the Secret's key), no token
ANNOTATION = "hearth/"  # prefix of the annotations that carry Hearth's facts
# Per pod, for the engine's own process (loading, tokenizing): the CPU and memory of the examples in
# production-stack's values.yaml (requestCPU 6) and KServe 0.20's text-generation guide (6 CPUs, 24Gi).
REQUEST_CPU = 6
REQUEST_MEMORY = "24Gi"
NOTE_WIDTH = 100
# A pod's start, sized from the checkpoint's bytes (startup_seconds): each rate a stated assumption, not a measurement.
DOWNLOAD_BYTES_PER_SECOND = 50 * 10**6  # from the Hugging Face hub: 400 Mbit/s, a modest cloud link
LOAD_BYTES_PER_SECOND = 125 * 10**6  # read from the volume: the baseline of AWS EBS gp3, a common default class
ENGINE_START_SECONDS = 900  # beyond the bytes: imports, KV-cache profiling, CUDA graphs, torch.compile on a cold cache
UNKNOWN_WEIGHTS_SECONDS = 3600  # the whole start when the checkpoint's size is unknown


@dataclass(frozen=True)
class ClusterExport:
    """One target's export. ``target``: "production-stack", "kserve" or "lws"; ``title`` and ``follows``
    (the target's version and the public source it was read from) say what the file is; ``filename``
    the name to save it as; ``documents`` the YAML documents as data (empty when not offered);
    ``notes``: what to do with the file (the Secret to create, what to check), or why it is not offered."""

    target: str
    title: str
    follows: str
    filename: str
    documents: list[dict[str, Any]]
    notes: list[str]

    @property
    def offered(self) -> bool:
        return bool(self.documents)

    @property
    def text(self) -> str:
        """The file: comment lines (what it is, what it follows, the notes), then the documents as YAML
        (PyYAML, keys in the order built); "" when not offered."""
        if not self.documents:
            return ""
        lines = [f"{self.title}, exported by Hearth.", f"Follows {self.follows}.", *self.notes]
        wrap = textwrap.TextWrapper(NOTE_WIDTH, break_long_words=False, break_on_hyphens=False)
        header = "".join(f"# {part}\n" for line in lines for part in wrap.wrap(line))
        body = yaml.dump_all(self.documents, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
        return header + body


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, writing a value used twice in full rather than as an anchor and alias, which
    some Kubernetes tools refuse and people misread."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def refused(target: str, title: str, follows: str, reason: str) -> ClusterExport:
    """An export not offered, with the reason."""
    return ClusterExport(target, title, follows, "", [], [reason])


def secret_name(facts: ClusterFacts) -> str:
    """The Secret every document takes the engine's key (and a Hugging Face token) from."""
    return f"{facts.name}-engine"


def secret_env(facts: ClusterFacts, key: str, optional: bool = False) -> dict[str, Any]:
    """A container env entry read from the deployment's Secret (core/v1 EnvVar, valueFrom.secretKeyRef)."""
    ref: dict[str, Any] = {"name": secret_name(facts), "key": key}
    if optional:
        ref["optional"] = True
    return {"name": key, "valueFrom": {"secretKeyRef": ref}}


def engine_env(facts: ClusterFacts) -> list[dict[str, Any]]:
    """The engine's key from the Secret, and for a Hugging Face model its token (optional: public models
    need none)."""
    env = [secret_env(facts, ENGINE_KEY)]
    return [*env, secret_env(facts, HF_TOKEN, optional=True)] if facts.model_repo_id else env


def annotations(facts: ClusterFacts) -> dict[str, str]:
    """Hearth's facts that no target has a field for, as ``hearth/…`` annotations: where it came from
    and the SLO targets (seconds), so whoever sizes the cluster sees what the deployment promised."""
    notes = {
        f"{ANNOTATION}served-model-name": facts.served_model_name,
        f"{ANNOTATION}engine": f"vllm {facts.engine_version}",
        f"{ANNOTATION}image": facts.pinned_image,
    }
    if facts.gpu_model:
        memory = f", {facts.gpu_memory_bytes / GIB:.0f} GiB" if facts.gpu_memory_bytes else ""
        notes[f"{ANNOTATION}planned-on"] = f"{facts.gpu_model}{memory}"
    if facts.ttft_slo_seconds is not None:
        notes[f"{ANNOTATION}ttft-slo-seconds"] = f"{facts.ttft_slo_seconds:g}"
    if facts.itl_slo_seconds is not None:
        notes[f"{ANNOTATION}itl-slo-seconds"] = f"{facts.itl_slo_seconds:g}"
    return notes


def startup_seconds(facts: ClusterFacts, downloads: bool) -> int:
    """Seconds an engine pod may take to answer /health: ENGINE_START_SECONDS, plus the checkpoint's bytes read at
    LOAD_BYTES_PER_SECOND, plus (when the engine itself ``downloads`` them) the same bytes at
    DOWNLOAD_BYTES_PER_SECOND; UNKNOWN_WEIGHTS_SECONDS when ``weights_bytes`` is 0."""
    if not facts.weights_bytes:
        return UNKNOWN_WEIGHTS_SECONDS
    seconds = ENGINE_START_SECONDS + facts.weights_bytes / LOAD_BYTES_PER_SECOND
    if downloads:
        seconds += facts.weights_bytes / DOWNLOAD_BYTES_PER_SECOND
    return math.ceil(seconds)


def startup_probe(facts: ClusterFacts, downloads: bool, delay: int, period: int) -> dict[str, int]:
    """A startup probe's timing (core/v1 Probe fields, seconds) that allows startup_seconds: first check after
    ``delay``, then every ``period``, as many failures as the rest of the budget holds."""
    threshold = max(1, math.ceil((startup_seconds(facts, downloads) - delay) / period))
    return {"initialDelaySeconds": delay, "periodSeconds": period, "failureThreshold": threshold}


def startup_note(facts: ClusterFacts, downloads: bool) -> str:
    """How the startup probe was sized, in words."""
    seconds = startup_seconds(facts, downloads)
    if not facts.weights_bytes:
        return (
            f"The startup probe allows {seconds / 60:.0f} minutes: the checkpoint's size is unknown here; raise its "
            f"failureThreshold for a large model on a slow link."
        )
    fetched = f"downloaded at {DOWNLOAD_BYTES_PER_SECOND / 1e6:.0f} MB/s, " if downloads else ""
    return (
        f"The startup probe allows {seconds / 60:.0f} minutes: {facts.weights_bytes / GIB:.1f} GiB of weights "
        f"{fetched}read at {LOAD_BYTES_PER_SECOND / 1e6:.0f} MB/s, and {ENGINE_START_SECONDS / 60:.0f} minutes of "
        f"engine start; raise its failureThreshold on a slower link or volume."
    )


def node_selector(facts: ClusterFacts) -> dict[str, str]:
    """The GPU feature discovery labels (engines.export.node_labels) of a node with the GPUs the plan was made
    for, from their NVML name and memory; empty when those are unknown."""
    return gpu_node_labels(facts.gpu_model, facts.gpu_memory_bytes)[0]


def common_notes(facts: ClusterFacts) -> list[str]:
    """What every offered file needs said: the Secret to create (the key itself is never exported), an
    image not pinned, and the GPUs the plan was made for (the node selector that keeps the pods on such)."""
    token = f' --from-literal={HF_TOKEN}="<token; empty for a public model>"' if facts.model_repo_id else ""
    notes = [
        f"The engine API key is not exported: Hearth's is made per launch and stays on its box. Create the "
        f"Secret this file reads before applying it: kubectl create secret generic {secret_name(facts)} "
        f'--from-literal={ENGINE_KEY}="$(openssl rand -hex 32)"{token}. Clients send that key as their '
        f"bearer token (Hearth too, should it front this engine as an external endpoint)."
    ]
    if not facts.image_digest:
        notes.append(
            f"The image is not pinned: Hearth has no registry digest for {facts.image} (a local build, or "
            f"a deployment not launched yet). Replace the tag with the digest before relying on it."
        )
    labels, left_out = gpu_node_labels(facts.gpu_model, facts.gpu_memory_bytes)
    if facts.gpu_model:
        notes.append(
            f"gpu_memory_utilization {facts.gpu_memory_utilization:.2f} and max_model_len {facts.max_model_len:,} "
            f"were planned on {facts.gpu_model}; GPUs with less memory may not hold them."
        )
    if labels:
        pairs = ", ".join(f"{key}={value}" for key, value in labels.items())
        notes.append(
            f"The pods go only to nodes labelled {pairs} (labels NVIDIA's GPU feature discovery sets, from NVML, "
            f"as on this box); without GPU feature discovery, or for other GPUs, edit or remove that selector."
        )
    notes += [f"Node selector left out: {why}" for why in left_out]
    return notes


def below(facts: ClusterFacts, version: str) -> bool:
    """Whether the deployment's vLLM is older than ``version``."""
    return parse_version(facts.engine_version) < parse_version(version)
