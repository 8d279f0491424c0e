"""A deployment's facts handed to a cluster: engines.export writes the documents (production-stack Helm
values, a KServe InferenceService, a LeaderWorkerSet), this module fills in what this appliance knows.

A vLLM deployment exports as it runs: its pinned image digest, its model revision, its plan and flags. A
simulator deployment (demo mode) exports what vLLM would run with the same plan, from the configured vLLM
image, and says so. Other engines are refused with the reason.
"""

from django.conf import settings

from appliance.hardware import InventoryError, current_inventory
from console.deployments import external
from console.deployments.agent_support import launch_parsers
from console.deployments.lifecycle import image_ref
from console.deployments.models import Deployment
from console.errors import ConsoleError
from engines.export import ClusterExport, ClusterFacts, cluster_exports, registry_digest
from engines.launch import EngineKind, image_version

TARGETS = ("production-stack", "kserve", "lws")
SIMULATED = (
    "This deployment runs Hearth's engine simulator: the files are what vLLM would run with the same plan, "
    "from the configured vLLM image (HEARTH_IMAGE_VLLM), whose digest is pinned at the first real launch."
)

DEMO_REFUSED = (
    "{name} cannot be exported for a cluster: its model is a demo catalog entry, with no pinned revision and no "
    "weights, and a cluster must load the same commit. Add {repo} from Hugging Face (Models) to plan and export it."
)


def facts_of(dep: Deployment, gpus_per_node: int | None = None) -> ClusterFacts:
    """The facts of ``dep`` as engines.export reads them; ``gpus_per_node`` defaults to the GPUs of the box
    it is planned on (this one). Raises ConsoleError with the reason when no cluster document can be made of it
    (an external deployment among them: Hearth knows no plan, image or flags of engines it did not launch; and
    one of a demo catalog model, which has no pinned revision)."""
    external.refused(dep, "export")
    if dep.source.kind == dep.source.Kind.DEMO:
        raise ConsoleError(DEMO_REFUSED.format(name=dep.name, repo=dep.source.repo_id))
    if dep.engine == EngineKind.SIMULATOR:
        image, digest, version = settings.HEARTH_ENGINE_IMAGES[EngineKind.VLLM], "", ""
    else:
        image, digest, version = image_ref(dep), registry_digest(dep.engine_image), dep.engine_version
    image_ver = image_version(image).lstrip("v")
    tool_call_parser, reasoning_parser = launch_parsers(dep)
    gpu_name, gpu_memory = planned_gpus(dep)
    try:
        return ClusterFacts.from_plan(
            dep.stored_plan,
            served_model_name=dep.served_model_name,
            engine=EngineKind.VLLM if dep.engine == EngineKind.SIMULATOR else dep.engine,
            engine_version=(version.split("+", 1)[0] or image_ver),
            image=image,
            image_digest=digest,
            gpus_per_node=gpus_per_node or _box_gpus(dep),
            model_repo_id=dep.source.repo_id if dep.source.kind == dep.source.Kind.HF else "",
            model_revision=dep.source.revision if dep.source.kind == dep.source.Kind.HF else "",
            model_path=dep.source.path if dep.source.kind == dep.source.Kind.LOCAL else "",
            extra_args=dep.extra_args,
            replica_count=dep.replica_count,
            gpu_model=gpu_name,
            gpu_memory_bytes=gpu_memory,
            weights_bytes=dep.source.weights_bytes,
            tool_call_parser=tool_call_parser,
            reasoning_parser=reasoning_parser,
        )
    except ValueError as exc:
        raise ConsoleError(f"{dep.name} cannot be exported for a cluster: {exc}") from None


def planned_gpus(dep: Deployment) -> tuple[str, int]:
    """(NVML name, total memory in bytes) of the GPUs ``dep``'s plan holds, read from this box's inventory (real
    or simulated: a simulated box carries real GPUs' NVML names and memory), never from the console's sentence
    about them (``Deployment.gpu_model``, the plan's ``gpu_name``, which may say "(simulated)"). ("", 0) when
    the inventory cannot be read, lacks those GPUs, or they are not all alike (the export then selects no node);
    the smallest memory when they differ only in it."""
    try:
        devices = current_inventory().devices
    except InventoryError:
        return "", 0
    held = [d for d in devices if d.index in set(dep.stored_plan.gpu_indices)]
    names = {d.name for d in held}
    if not held or len(held) != len(dep.stored_plan.gpu_indices) or len(names) != 1:
        return "", 0
    return names.pop(), min(d.memory_total_bytes for d in held)


def _box_gpus(dep: Deployment) -> int:
    """The GPUs this box has: a cluster node like it holds as many (the plan's count when unreadable)."""
    try:
        return len(current_inventory().devices) or 1
    except InventoryError:
        return dep.stored_plan.gpu_count or 1


def exports_of(dep: Deployment, gpus_per_node: int | None = None) -> list[ClusterExport]:
    """Every target's export of ``dep``, offered or with the reason it is not (a simulator deployment's
    notes say what its files stand for). Raises ConsoleError as facts_of does."""
    facts = facts_of(dep, gpus_per_node)
    try:
        exports = cluster_exports(facts)
    except ValueError as exc:
        raise ConsoleError(f"{dep.name} cannot be exported for a cluster: {exc}") from None
    if dep.engine == EngineKind.SIMULATOR:
        exports = [_with_note(e, SIMULATED) for e in exports]
    return exports


def export_of(dep: Deployment, target: str, gpus_per_node: int | None = None) -> ClusterExport:
    """One target's export. Raises ConsoleError for an unknown target or one not offered (with why)."""
    if target not in TARGETS:
        raise ConsoleError(f"Unknown export target {target!r}; choose one of: {', '.join(TARGETS)}.")
    found = next(e for e in exports_of(dep, gpus_per_node) if e.target == target)
    if not found.offered:
        raise ConsoleError(f"{found.title}: not offered for {dep.name}. {' '.join(found.notes)}")
    return found


def _with_note(export: ClusterExport, note: str) -> ClusterExport:
    return ClusterExport(
        export.target, export.title, export.follows, export.filename, export.documents, [note, *export.notes]
    )
