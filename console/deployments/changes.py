"""Changing a deployment's settings: a new plan first, then a Recreate when it runs; and the plan made
again at launch when its GPUs were taken (the out-of-memory remedy, a change applied as a new launch,
is console.deployments.remedy_actions).

A deployment holds its GPUs exclusively, so the new engine cannot start beside the old one: the old
replicas stop first, then the deployment launches with the new settings (the Recreate strategy of
Kubernetes Deployments). The expected downtime, shown before the admin confirms, is the stop's grace
period plus how long the last start took to become ready.

A change of the replica count alone, on a ready deployment, is no Recreate: the replicas serving keep their GPUs and
keep serving while the added ones start, or while the removed ones drain and stop (console.deployments.scaling); no
downtime.
"""

from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction

from console.audit.recording import changed, record
from console.deployments import dispatch, external
from console.deployments.engine_flags import check_extra_args
from console.deployments.gpu_holds import held_gpus
from console.deployments.models import ACTIVE_STATES, Deployment, DeploymentState
from console.deployments.planning import plan_for
from console.errors import ConsoleError
from engines.stored_plan import StoredPlan

STOP_GRACE_SECONDS = 10.0  # runtimes' SIGTERM-to-SIGKILL grace (Runtime.stop)


@dataclass(frozen=True)
class ChangePreview:
    """The plan the new settings give; whether the running engine must stop first (``recreate``);
    the expected downtime in seconds then (None when it never became ready, so no load time is known)."""

    plan: StoredPlan
    recreate: bool
    downtime_seconds: float | None
    scale: tuple[int, int] | None = None  # (replicas now, replicas then) when only the count changes, in place


def replicas_gpus(preview: ChangePreview) -> list[tuple[int, ...]]:
    """The GPU indices each replica of the previewed plan takes, in replica order (empty for a CPU plan)."""
    plan = preview.plan
    if not plan.tensor_parallel_size:
        return []
    return [plan.replica_gpus(slot) for slot in range(len(plan.gpu_indices) // plan.tensor_parallel_size)]


def current_settings(deployment: Deployment) -> dict[str, Any]:
    """The deployment's settings now, in preview_change's keywords (a change starts from these)."""
    plan = deployment.stored_plan
    return {
        "max_model_len": deployment.max_model_len,
        "kv_space_gib": deployment.kv_space_gib,
        "kv_cache_dtype": plan.kv_cache_dtype,
        "gpu_memory_utilization": plan.gpu_memory_utilization,
        "tensor_parallel_size": plan.tensor_parallel_size,
        "max_num_seqs": plan.max_num_seqs,
        "extra_args": list(deployment.extra_args),
        "tool_call_parser": deployment.tool_call_parser,
        "reasoning_parser": deployment.reasoning_parser,
        "fit_max_tokens": deployment.fit_max_tokens,
        "replica_count": deployment.replica_count,
    }


def preview_change(
    deployment: Deployment,
    *,
    max_model_len: int,
    kv_space_gib: float,
    kv_cache_dtype: str,
    gpu_memory_utilization: float,
    tensor_parallel_size: int,
    max_num_seqs: int,
    extra_args: list[str],
    tool_call_parser: str,
    reasoning_parser: str,
    fit_max_tokens: bool,
    replica_count: int | None = None,
) -> ChangePreview:
    """What changing ``deployment`` to these settings would do; changes nothing. ``replica_count`` None keeps the
    deployment's; changed alone on a ready deployment, the replicas serving keep their GPUs (``scale``, no downtime).

    Raises ConsoleError for flags Hearth refuses or numbers the planner refuses, or for an external deployment
    (no plan: Hearth does not run its engines).
    """
    external.refused(deployment, "change the settings of")
    check_extra_args(extra_args, deployment.engine)
    old = deployment.replica_count
    new = old if replica_count is None else replica_count
    plan = plan_for(
        deployment.source,
        deployment.engine,
        max_model_len=max_model_len,
        kv_space_gib=kv_space_gib,
        kv_cache_dtype=kv_cache_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        tensor_parallel_size=tensor_parallel_size,
        max_num_seqs=max_num_seqs,
        replica_count=new,
        exclude=deployment.pk,
        tool_call_parser=tool_call_parser,
        reasoning_parser=reasoning_parser,
        fit_max_tokens=fit_max_tokens,
        max_tokens_cap=deployment.max_tokens_cap,
    )
    asked = {
        "max_model_len": max_model_len,
        "kv_space_gib": kv_space_gib,
        "kv_cache_dtype": kv_cache_dtype,
        "gpu_memory_utilization": gpu_memory_utilization,
        "tensor_parallel_size": tensor_parallel_size,
        "max_num_seqs": max_num_seqs,
        "extra_args": extra_args,
        "tool_call_parser": tool_call_parser,
        "reasoning_parser": reasoning_parser,
        "fit_max_tokens": fit_max_tokens,
        "replica_count": old,
    }
    if new != old and deployment.state == DeploymentState.READY and asked == current_settings(deployment):
        live = deployment.replicas.launched().filter(stopped_at__isnull=True).count()
        if live != old:
            raise ConsoleError(
                f"{deployment.name} is still changing its replica count ({live} replicas live for {old} wanted); "
                "preview again once it has settled."
            )
        scaled = replace(plan, gpu_indices=_kept_gpus(deployment.stored_plan, plan, old, new))
        return ChangePreview(scaled, recreate=False, downtime_seconds=0.0, scale=(old, new))
    recreate = deployment.state in ACTIVE_STATES
    return ChangePreview(plan, recreate, _downtime(deployment) if recreate else None)


def _kept_gpus(current: StoredPlan, planned: StoredPlan, old: int, new: int) -> tuple[int, ...]:
    """Every replica's GPUs after a change of the count alone: the first ``new`` replicas keep theirs; added ones take
    GPUs of ``planned`` (planned on the free GPUs and this deployment's own) that no replica holds now."""
    tp = planned.tensor_parallel_size
    if new <= old:
        return current.gpu_indices[: new * tp]
    added = [i for i in planned.gpu_indices if i not in current.gpu_indices]
    return (*current.gpu_indices, *added[: (new - old) * tp])


def _downtime(deployment: Deployment) -> float | None:
    loaded = deployment.replicas.launched().filter(ready_at__isnull=False).order_by("-ready_at").first()
    if loaded is None or loaded.ready_at is None:
        return None
    return STOP_GRACE_SECONDS + (loaded.ready_at - loaded.started_at).total_seconds()


def apply_change(deployment: Deployment, **settings: Any) -> ChangePreview:
    """Change ``deployment`` to these settings (preview_change's keywords). A running deployment is
    recreated: it moves to stopping, its replicas stop, then it launches with the new plan. A stopped
    or failed one keeps its state, ready to launch. Either way the image is pinned anew at the launch,
    from the configured one (an upgrade of HEARTH_IMAGE_* reaches a deployment this way).

    A change of the replica count alone on a ready deployment (the preview's ``scale``) keeps it ready, its image pin
    and its replicas serving: console.deployments.scaling starts the added replicas or drains and stops the removed.

    Raises ConsoleError when the new plan does not fit (nothing is changed then) or the deployment is
    stopping.
    """
    preview = preview_change(deployment, **settings)
    if not preview.plan.fits:
        raise ConsoleError(" ".join([preview.plan.reasons[-1], *preview.plan.remedies]))
    if preview.scale is not None:
        _apply_scale(deployment, preview.plan, preview.scale, settings)
        return preview
    fields = {
        "plan": preview.plan.to_json(),
        "max_model_len": preview.plan.max_model_len,
        "kv_space_gib": settings["kv_space_gib"],
        "extra_args": settings["extra_args"],
        "tool_call_parser": settings["tool_call_parser"].strip(),
        "reasoning_parser": settings["reasoning_parser"].strip(),
        "fit_max_tokens": settings["fit_max_tokens"],
        "replica_count": settings.get("replica_count") or deployment.replica_count,
        "engine_image": "",  # re-pinned to the configured image at the next launch
        "engine_image_ref": "",
    }
    with transaction.atomic():
        row = Deployment.objects.select_for_update().get(pk=deployment.pk)
        if row.state == DeploymentState.STOPPING:
            raise ConsoleError(f"{row.name} is stopping; change it once it has stopped.")
        Deployment.objects.filter(pk=row.pk).update(**fields)
        diff = changed(current_settings(row), {**settings, "max_model_len": preview.plan.max_model_len})
        record(None, "deployment.change", row, {**diff, "recreate": preview.recreate})
        if preview.recreate:
            if not row.move(DeploymentState.STOPPING, "Recreating with the new settings: the old engine stops first."):
                raise ConsoleError(f"{row.name} changed state meanwhile; try again.")
            dispatch.send_after_commit(dispatch.RECREATE, row.pk)
    deployment.refresh_from_db()
    return preview


def _apply_scale(deployment: Deployment, plan: StoredPlan, scale: tuple[int, int], settings: dict[str, Any]) -> None:
    old, new = scale
    with transaction.atomic():
        row = Deployment.objects.select_for_update().get(pk=deployment.pk)
        if row.state != DeploymentState.READY or row.replica_count != old:
            raise ConsoleError(f"{row.name} changed meanwhile (now {row.state_words}); preview the change again.")
        Deployment.objects.filter(pk=row.pk).update(plan=plan.to_json(), replica_count=new)
        record(None, "deployment.change", row, {**changed(current_settings(row), settings), "recreate": False})
        step = f"starting {new - old}" if new > old else f"draining {old - new}, then stopping it"
        row.progress(f"Serving; from {old} to {new} replica{'s' if new > 1 else ''}: {step}.")
        dispatch.send_after_commit(dispatch.SCALE, row.pk)
    deployment.refresh_from_db()


def replan_on_free_gpus(deployment: Deployment) -> str:
    """Before a launch: when other active deployments now hold some of the GPUs its plan names, plan it
    again, same settings, on the free ones and store that plan. Returns "" when it may launch, else why
    not (no free GPUs fit it; the words say which are held)."""
    held = held_gpus(exclude=deployment.pk)
    taken = [f"GPU {i} ({held[i]})" for i in deployment.stored_plan.gpu_indices if i in held]
    if not taken:
        return ""
    try:
        plan = preview_change(deployment, **current_settings(deployment)).plan
        if not plan.fits:
            raise ConsoleError(plan.reasons[-1])
    except ConsoleError as exc:
        return (
            f"Its GPUs are held by other deployments: {', '.join(taken)}, and it does not fit on the free "
            f"ones: {exc} Stop one of those first."
        )
    moved = ", ".join(str(i) for i in plan.gpu_indices)
    plan = plan.noted(f"Planned again at launch on GPU {moved}: {', '.join(taken)} held.", first=True)
    Deployment.objects.filter(pk=deployment.pk).update(plan=plan.to_json(), max_model_len=plan.max_model_len)
    deployment.refresh_from_db()
    return ""
