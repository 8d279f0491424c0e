"""What the console pages and the JSON API both do: add models, plan, deploy, launch, stop (API keys: console.apikeys).

Errors a user can fix raise ConsoleError with a message fit to show as it is. Work with side effects
on engines is handed to Celery tasks after the transaction commits.
"""

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import redis
from django.conf import settings
from django.db import IntegrityError, transaction

from appliance.hardware import InventoryError, current_inventory
from console.hub import HubError, read_hub_model
from console.models import ACTIVE_STATES, Deployment, DeploymentState, ModelSource
from engines.adapters import parse_version
from engines.gpus import Inventory
from engines.launch import EngineKind, image_version
from engines.modelconfig import ModelConfigError, parse_config, read_checkpoint
from engines.planner import DEFAULT_MAX_NUM_SEQS, PlanRequest, plan_gpu
from engines.sizing import plan_cpu
from engines.vllm import user_flag_names

ROUTING_VERSION_KEY = "hearth:routing-version"
MAX_REPLICAS = 8
MAX_KV_SPACE_GIB = 65_536
INT_MAX = 2**31 - 1  # PostgreSQL's integer column
MAX_NUM_SEQS = 65_536
MAX_EXTRA_ARGS, MAX_EXTRA_ARGS_CHARS = 100, 2000  # the console's field takes 2,000 characters too
PLANNED_FLAGS = frozenset(
    {"--max-model-len", "--gpu-memory-utilization", "--tensor-parallel-size", "--kv-cache-dtype", "--max-num-seqs"}
)  # flags whose values come from the plan; an override in extra_args would bypass its checks
HEARTH_FLAGS = frozenset({"--model", "--served-model-name", "--host", "--port", "--api-key", "--uds"})  # Hearth's
# Flags that change how much GPU memory or how many GPUs an engine takes, behind the plan's back.
RESOURCE_FLAGS = frozenset({"--pipeline-parallel-size", "--data-parallel-size", "--data-parallel-size-local",
                            "--num-gpu-blocks-override",
                            "--kv-cache-memory-bytes", "--block-size", "--cpu-offload-gb", "--config"})  # fmt: skip
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
SERVED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$")  # e.g. meta-llama/Llama-3.1-8B-Instruct


class ConsoleError(ValueError):
    """A request the user can correct; the message says how."""


def bump_routing_version() -> None:
    """Tell every gateway process, through Redis, that keys or routes changed (they reload lazily)."""
    redis.Redis.from_url(settings.REDIS_URL).incr(ROUTING_VERSION_KEY)


def check_name(name: str, what: str, pattern: re.Pattern[str] = NAME) -> str:
    """The name, stripped; names are case-sensitive, as model names are in the OpenAI API."""
    name = name.strip()
    if not pattern.match(name):
        allowed = "'.', '-', '_', ':' or '/'" if pattern is SERVED_NAME else "'.', '-' or '_'"
        raise ConsoleError(
            f"{what} {name!r} must start with a letter or digit and use only letters, digits, {allowed}."
        )
    return name


def add_local_model(name: str, path: str) -> ModelSource:
    """Register a local checkpoint folder. Raises ConsoleError when it is unreadable or the name is taken."""
    name = check_name(name, "Model name")
    folder = Path(path).expanduser()
    if not folder.is_absolute():
        raise ConsoleError(f"Model path {path!r} must be an absolute path on the appliance.")
    try:
        ckpt = read_checkpoint(folder)
    except ModelConfigError as exc:
        raise ConsoleError(str(exc)) from None
    return _save_model(
        name=name,
        kind=ModelSource.Kind.LOCAL,
        path=str(folder),
        config=ckpt.raw_config,
        weights_bytes=ckpt.weights_bytes,
        tensor_dtypes=ckpt.tensor_dtypes,
    )


def add_hf_model(name: str, repo_id: str, revision: str) -> ModelSource:
    """Register a Hugging Face repo, pinning ``revision`` (branch, tag or sha) to its commit sha.

    Reads config.json and the safetensors headers remotely; no weights are downloaded.
    Raises ConsoleError when the hub cannot be reached or the repo is not a safetensors checkpoint.
    """
    name = check_name(name, "Model name")
    try:
        model = read_hub_model(repo_id, revision)
    except HubError as exc:
        raise ConsoleError(str(exc)) from None
    return _save_model(
        name=name,
        kind=ModelSource.Kind.HF,
        repo_id=repo_id,
        revision=model.revision,
        config=model.config,
        weights_bytes=model.weights_bytes,
        tensor_dtypes=model.tensor_dtypes,
        license=model.license,
    )


def _save_model(**fields: Any) -> ModelSource:
    try:
        parse_config(fields["config"])
    except ModelConfigError as exc:
        raise ConsoleError(str(exc)) from None
    try:
        with transaction.atomic():
            return ModelSource.objects.create(**fields)
    except IntegrityError:
        raise ConsoleError(f"A model named {fields['name']!r} already exists.") from None


def available_engines() -> list[EngineKind]:
    """The engines this appliance can launch: local processes run vLLM (CPU) and the simulator; the
    Docker runtime adds vLLM and SGLang containers where real GPUs are (not on a simulated inventory)."""
    engines = [EngineKind.VLLM_CPU, EngineKind.SIMULATOR]
    if settings.HEARTH_RUNTIME == "docker" and not settings.HEARTH_GPU_INVENTORY.startswith("sim:"):
        engines += [EngineKind.VLLM, EngineKind.SGLANG]
    return engines


def _vllm_release(engine: str) -> tuple[int, int] | None:
    """(major, minor) of the vLLM image a vLLM deployment will run, so the plan follows that release's
    memory accounting; None for other engines (the planner's general estimate)."""
    if engine != EngineKind.VLLM:
        return None
    release = parse_version(image_version(settings.HEARTH_ENGINE_IMAGES[engine]).lstrip("v"))
    return release[0], release[1]


def plan_for(
    model: ModelSource,
    engine: str,
    *,
    max_model_len: int = 0,
    kv_space_gib: float = 1.0,
    kv_cache_dtype: str = "auto",
    gpu_memory_utilization: float = 0.0,
    tensor_parallel_size: int = 0,
    replica_count: int = 1,
    max_num_seqs: int = 0,
    exclude: int | None = None,
) -> dict[str, Any]:
    """The sizing plan for ``model`` on ``engine``, as stored on a deployment (a JSON-able dict).

    vLLM (CPU) is planned from its KV space (GiB); GPU engines from the GPU inventory in force, less the
    GPUs other active deployments hold (``exclude``: a deployment whose own GPUs count as free).
    Raises ConsoleError for an unknown engine, bad numbers, or an inventory that cannot be read.
    """
    if engine not in available_engines():
        offered = ", ".join(available_engines())
        raise ConsoleError(f"Engine '{engine}' is not available here; choose one of: {offered}.")
    if not 0 <= max_model_len <= INT_MAX or not 0 <= tensor_parallel_size <= 64 or not 0 <= gpu_memory_utilization < 1:
        raise ConsoleError(
            "max_model_len and tensor parallel size must be 0 (auto) or more, "
            "gpu_memory_utilization 0 (auto) or a ratio below 1."
        )
    if not 0 < kv_space_gib <= MAX_KV_SPACE_GIB:  # vLLM (CPU)'s only, but never stored out of range
        raise ConsoleError(f"KV space must be above 0 and at most {MAX_KV_SPACE_GIB:,} GiB.")
    if not 0 <= max_num_seqs <= MAX_NUM_SEQS:
        raise ConsoleError(f"max_num_seqs must be 0 (the planner's default) to {MAX_NUM_SEQS:,} sequences.")
    config = parse_config(model.config)
    if engine == EngineKind.VLLM_CPU:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // max(replica_count, 1)
        cpu_plan = plan_cpu(config, model.weights_bytes, kv_space_gib, max_model_len, host_memory_bytes=memory)
        return {**dataclasses.asdict(cpu_plan), "remedies": [], "inventory": "CPU (VLLM_CPU_KVCACHE_SPACE)"}
    try:
        inventory, held = free_gpus(current_inventory(), exclude)
        if held and not inventory.devices:
            raise ConsoleError(f"Every GPU is held by a running deployment: {held}. Stop one first.")
        request = PlanRequest(
            vllm_version=_vllm_release(engine),
            max_model_len=max_model_len,
            kv_cache_dtype=kv_cache_dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            max_num_seqs=max_num_seqs or DEFAULT_MAX_NUM_SEQS,
        )
        gpu_plan = plan_gpu(config, model.weights_bytes, inventory, request)
    except (InventoryError, ValueError) as exc:
        raise ConsoleError(str(exc)) from None
    plan = {**dataclasses.asdict(gpu_plan), "inventory": inventory.describe(), "gpu_count": len(inventory.devices)}
    if held:  # first, so that a refusal's own reason stays the last one
        plan["reasons"].insert(0, f"GPUs held by running deployments are left out: {held}.")
    if gpu_plan.tensor_parallel_size:
        free = [d.index for d in inventory.devices]
        plan["gpu_indices"] = free[: gpu_plan.tensor_parallel_size * replica_count]
        needed = gpu_plan.tensor_parallel_size * replica_count
        if gpu_plan.fits and needed > len(free):
            plan["fits"] = False
            plan["reasons"].append(
                f"{replica_count} replicas at tensor parallel {gpu_plan.tensor_parallel_size} need {needed} GPUs; "
                f"{len(free)} are free on this box."
            )
    return plan


def held_gpus(exclude: int | None = None) -> dict[int, str]:
    """GPU index → the active deployment holding it (each deployment holds its plan's GPUs exclusively)."""
    held: dict[int, str] = {}
    for dep in Deployment.objects.filter(state__in=ACTIVE_STATES).exclude(pk=exclude or 0):
        for index in dep.plan.get("gpu_indices") or []:
            held[int(index)] = dep.name
    return held


def free_gpus(inventory: Inventory, exclude: int | None = None) -> tuple[Inventory, str]:
    """The inventory less the GPUs active deployments (but ``exclude``) hold, and which those are, in words."""
    held = held_gpus(exclude)
    free = Inventory(inventory.source, [d for d in inventory.devices if d.index not in held])
    words = ", ".join(f"GPU {i} ({name})" for i, name in sorted(held.items()))
    return free, words


def _matching(flags: set[str], protected: frozenset[str]) -> list[str]:
    """The protected flags that ``flags`` name, abbreviations included (vLLM's argparse accepts any
    unambiguous prefix: ``--max-model`` is ``--max-model-len``)."""
    return sorted({p for p in protected for f in flags if f.startswith("--") and len(f) > 3 and p.startswith(f)})


def check_extra_args(extra_args: list[str]) -> None:
    """Refuse extra engine flags that Hearth sets itself, that take GPUs behind the plan's back, or that
    the plan decides. Raises ConsoleError naming them."""
    if len(extra_args) > MAX_EXTRA_ARGS or sum(map(len, extra_args)) > MAX_EXTRA_ARGS_CHARS:
        raise ConsoleError(f"At most {MAX_EXTRA_ARGS} extra engine flags, {MAX_EXTRA_ARGS_CHARS:,} characters in all.")
    if not all(arg.isprintable() for arg in extra_args):
        raise ConsoleError("Extra engine flags must be printable text (no control characters).")
    flags = user_flag_names(extra_args)
    if owned := _matching(flags, HEARTH_FLAGS):
        raise ConsoleError(f"{', '.join(owned)}: Hearth sets these itself (the gateway relies on them).")
    if resources := _matching(flags, RESOURCE_FLAGS):
        raise ConsoleError(f"{', '.join(resources)}: these change what the engine takes of the GPUs behind the plan's "
                           "back; Hearth does not pass them.")  # fmt: skip
    if planned := _matching(flags, PLANNED_FLAGS):
        raise ConsoleError(
            f"{', '.join(planned)}: set {'it' if len(planned) == 1 else 'them'} in the deployment's fields, so the "
            "plan can check the value fits, not among the extra engine flags."
        )


def create_deployment(
    *,
    name: str,
    model: ModelSource,
    engine: str,
    max_model_len: int = 0,
    kv_space_gib: float = 1.0,
    served_model_name: str = "",
    extra_args: list[str] | None = None,
    kv_cache_dtype: str = "auto",
    gpu_memory_utilization: float = 0.0,
    tensor_parallel_size: int = 0,
    replica_count: int = 1,
    max_tokens_cap: int | None = None,
    max_num_seqs: int = 0,
) -> Deployment:
    """Create a stopped deployment with its plan; launch it with ``launch``.

    Raises ConsoleError when the plan does not fit (with what would), the replicas do not fit the
    GPUs or the host's memory, or a name is taken.
    """
    if not 1 <= replica_count <= MAX_REPLICAS:
        raise ConsoleError(f"A deployment runs 1 to {MAX_REPLICAS} replicas.")
    if max_tokens_cap is not None and not 1 <= max_tokens_cap <= INT_MAX:
        raise ConsoleError(f"The max_tokens cap must be from 1 to {INT_MAX:,} tokens (or empty for none).")
    name = check_name(name, "Deployment name")
    served = check_name(served_model_name or name, "Served model name", SERVED_NAME)
    check_extra_args(extra_args or [])
    plan = plan_for(
        model,
        engine,
        max_model_len=max_model_len,
        kv_space_gib=kv_space_gib,
        kv_cache_dtype=kv_cache_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        tensor_parallel_size=tensor_parallel_size,
        replica_count=replica_count,
        max_num_seqs=max_num_seqs,
    )
    if not plan["fits"]:
        raise ConsoleError(" ".join([plan["reasons"][-1], *plan["remedies"]]))
    try:
        with transaction.atomic():
            return Deployment.objects.create(
                name=name,
                model=model,
                engine=engine,
                served_model_name=served,
                max_model_len=plan["max_model_len"],
                kv_space_gib=kv_space_gib,
                extra_args=extra_args or [],
                plan=plan,
                replica_count=replica_count,
                max_tokens_cap=max_tokens_cap,
                state=DeploymentState.STOPPED,
            )
    except IntegrityError:
        raise ConsoleError("A deployment with that name or served model name already exists.") from None


def launch(deployment: Deployment) -> None:
    """Move a stopped or failed deployment to pending and enqueue its launch after commit.

    Raises ConsoleError when it is already active.
    """
    from console.tasks import launch_deployment

    with transaction.atomic():
        if not deployment.move(DeploymentState.PENDING, "Waiting for a worker."):
            then = "wait until it has stopped" if deployment.state == DeploymentState.STOPPING else "stop it first"
            raise ConsoleError(f"{deployment.name} is {deployment.state}; {then}, then launch it again.")
        transaction.on_commit(lambda: launch_deployment.delay(deployment.pk))


def stop(deployment: Deployment) -> None:
    """Move an active deployment to stopping and enqueue the stop after commit.

    Raises ConsoleError when it is not running.
    """
    from console.tasks import stop_deployment

    with transaction.atomic():
        if deployment.state not in ACTIVE_STATES or not deployment.move(DeploymentState.STOPPING):
            raise ConsoleError(f"{deployment.name} is {deployment.state}; there is nothing to stop.")
        transaction.on_commit(bump_routing_version)
        transaction.on_commit(lambda: stop_deployment.delay(deployment.pk))



def delete_deployment(deployment: Deployment) -> None:
    """Forget a stopped or failed deployment and its replicas' records. Raises ConsoleError while it runs."""
    with transaction.atomic():
        if not Deployment.objects.filter(
            pk=deployment.pk, state__in=[DeploymentState.STOPPED, DeploymentState.FAILED]
        ).delete()[0]:
            raise ConsoleError(f"{deployment.name} is {deployment.state}; stop it before deleting it.")
        transaction.on_commit(bump_routing_version)


def delete_model(model: ModelSource) -> None:
    """Forget a model no deployment uses (its files stay where they are). Raises ConsoleError otherwise."""
    if names := list(model.deployments.values_list("name", flat=True)):
        raise ConsoleError(f"{model.name} is used by {', '.join(names)}; delete those deployments first.")
    model.delete()
