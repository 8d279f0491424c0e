"""A cluster export's result, and what every target shares: the Secret the engine's key comes from, the
annotations that carry Hearth's facts, the notes that go with the file, and YAML written by PyYAML."""

import textwrap
from dataclasses import dataclass
from typing import Any

import yaml

from engines.engine_version import parse_version
from engines.export.facts import GIB, ClusterFacts

ENGINE_KEY = "VLLM_API_KEY"  # vLLM reads its API key from this variable (vllm/envs.py); also the Secret's key
HF_TOKEN = "HF_TOKEN"  # noqa: S105 - the name of huggingface_hub's token variable (and the Secret's key), no token
ANNOTATION = "hearth/"  # prefix of the annotations that carry Hearth's facts
# Per pod, for the engine's own process (loading, tokenizing): the CPU and memory of the examples in
# production-stack's values.yaml (requestCPU 6) and KServe 0.20's text-generation guide (6 CPUs, 24Gi).
REQUEST_CPU = 6
REQUEST_MEMORY = "24Gi"
NOTE_WIDTH = 100


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


def common_notes(facts: ClusterFacts) -> list[str]:
    """What every offered file needs said: the Secret to create (the key itself is never exported), an
    image not pinned, and the GPUs the plan was made for."""
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
    if facts.gpu_model:
        product = facts.gpu_model.replace(" ", "-")
        notes.append(
            f"gpu_memory_utilization {facts.gpu_memory_utilization:.2f} and max_model_len {facts.max_model_len:,} "
            f"were planned on {facts.gpu_model}; GPUs with less memory may not hold them. NVIDIA's GPU feature "
            f"discovery labels such nodes nvidia.com/gpu.product={product}, a nodeSelector that keeps the "
            f"pods there."
        )
    return notes


def below(facts: ClusterFacts, version: str) -> bool:
    """Whether the deployment's vLLM is older than ``version``."""
    return parse_version(facts.engine_version) < parse_version(version)
