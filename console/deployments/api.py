"""The deployments' part of the JSON API: plan, create, launch, stop, sleep, wake, change, apply the remedy, delete;
register an engine Hearth did not launch, add one to a deployment as a replica, remove it."""

from dataclasses import replace
from typing import Any

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema, Status
from pydantic import StrictBool, StrictFloat

from console.api_bodies import Body, Flags, Integer, ModelName
from console.catalog.models import ModelSource
from console.deployments import admin_actions, changes, cluster_export, external, idle_actions, remedy_actions
from console.deployments.api_schemas import DeploymentOut, IdleChange, IdleCreate
from console.deployments.idle_settings import FIELDS as IDLE_FIELDS
from console.deployments.idle_settings import merged, set_idle_settings
from console.deployments.models import Deployment
from console.deployments.room_making import new_plan
from console.deployments.serving_limits import FIELDS as LIMIT_FIELDS
from console.deployments.serving_limits import (
    check_max_tokens_cap,
    judged,
    only_limits_differ,
    plan_with,
    serving_limits,
    set_serving_limits,
)
from console.errors import ConsoleError
from console.names import check_name

router = Router(tags=["deployments"])


class PlanIn(Body):
    model: ModelName = Field(description="The model's name, as GET /api/models lists it (not its id).")
    engine: str = "vllm-cpu"
    max_model_len: Integer = 0
    kv_space_gib: StrictFloat = Field(default_factory=lambda: settings.HEARTH_VLLM_CPU_KVCACHE_SPACE)  # GiB, vLLM (CPU)
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: StrictFloat = 0.0
    tensor_parallel_size: Integer = 0
    replica_count: Integer = 1
    max_num_seqs: Integer = 0
    tool_call_parser: str = Field("", description="Override of the plan's choice; 'none' turns it off.")
    reasoning_parser: str = Field("", description="Override of the plan's choice; 'none' turns it off.")
    fit_max_tokens: StrictBool = True
    name: str = Field("", description="The deployment's name, for the room's words (default: the model's name).")
    make_room: StrictBool = Field(False, description="Plan it as created with make_room would be.")

    def options(self) -> dict[str, Any]:
        fixed = {
            "model",
            "engine",
            "name",
            "served_model_name",
            "extra_args",
            "max_tokens_cap",
            "make_room",
            *IDLE_FIELDS,
        }
        return self.dict(exclude=fixed)


class DeploymentIn(PlanIn, IdleCreate):
    name: str
    served_model_name: str = ""
    extra_args: Flags = Field(default_factory=list)
    replica_count: Integer = 1
    max_tokens_cap: Integer | None = None
    make_room: StrictBool = Field(
        False,
        description="When it fits only if idle deployments are put aside: put them aside (the 400 without it names "
        "them, with the numbers) and launch it now.",
    )


def _model(name: str) -> ModelSource:
    model = ModelSource.objects.filter(name=name).first()
    if model is None:
        names = list(ModelSource.objects.order_by("name").values_list("name", flat=True)[:10])
        known = f"the models are {', '.join(names)}" if names else "no model is added yet (POST /api/models)"
        raise ConsoleError(f"No model named {name!r}: 'model' is a model's name, not its id; {known}.")
    return model


@router.post("/plan")
def plan(request: HttpRequest, data: PlanIn) -> dict[str, object]:
    """The plan POST /api/deployments would store, as the console's form previews it: on the free GPUs, or where
    it needs room, as if that room were made (console.deployments.room_making.new_plan); with ``room``, what would
    be put aside in words (null: nothing), and ``refused``, why it could not be created as asked (null: it can)."""
    model = _model(data.model)
    name = check_name(data.name, "Deployment name") if data.name else model.name
    planned = new_plan(name, model, data.engine, data.options(), data.make_room)
    room = planned.room.words() if planned.room else None
    return planned.plan.to_json() | {"room": room, "refused": planned.refusal or None}


@router.post("/deployments", response={201: DeploymentOut})
def create_deployment(request: HttpRequest, data: DeploymentIn) -> Status[Deployment]:
    return Status(
        201,
        admin_actions.create_deployment(
            name=data.name,
            model=_model(data.model),
            engine=data.engine,
            served_model_name=data.served_model_name,
            extra_args=data.extra_args,
            max_tokens_cap=data.max_tokens_cap,
            make_room=data.make_room,
            **data.options(),
            **data.dict(include=set(IDLE_FIELDS)),
        ),
    )


@router.get("/deployments", response=list[DeploymentOut])
def list_deployments(request: HttpRequest) -> list[Deployment]:
    return list(Deployment.objects.select_related("slo").order_by("name"))  # each one's SLO in the same query


@router.delete("/deployments/{pk}", response={204: None})
def delete_deployment(request: HttpRequest, pk: int) -> Status[None]:
    admin_actions.delete_deployment(get_object_or_404(Deployment, pk=pk))
    return Status(204, None)


@router.get("/deployments/{pk}", response=DeploymentOut)
def get_deployment(request: HttpRequest, pk: int) -> Deployment:
    return get_object_or_404(Deployment.objects.select_related("slo"), pk=pk)


class RoomIn(Body):
    """An optional body of launch and wake: ``make_room`` as on create (the query's ``?make_room=true`` too)."""

    make_room: StrictBool = False


class NoBody(Body):
    """An optional body of an operation that takes no field: ``{}``, or none; anything in it is a 400 naming it."""


@router.post("/deployments/{pk}/launch", response={202: DeploymentOut})
def launch_deployment(
    request: HttpRequest, pk: int, make_room: bool = False, data: RoomIn | None = None
) -> Status[Deployment]:
    """Launch a stopped or failed deployment. One that does not fit the free GPUs waits in pending ("Waiting for
    room: ...") while idle deployments are put aside (by their idle policy, or with ``make_room`` true, in the body
    or the query, the admin's consent), or is a 400 saying what would make room."""
    dep = get_object_or_404(Deployment, pk=pk)
    admin_actions.launch(dep, make_room=make_room or bool(data and data.make_room))
    return Status(202, dep)


@router.post("/deployments/{pk}/stop", response={202: DeploymentOut})
def stop_deployment(request: HttpRequest, pk: int, data: NoBody | None = None) -> Status[Deployment]:
    dep = get_object_or_404(Deployment, pk=pk)
    admin_actions.stop(dep)
    return Status(202, dep)


@router.post("/deployments/{pk}/sleep", response={202: DeploymentOut})
def sleep_deployment(request: HttpRequest, pk: int, data: NoBody | None = None) -> Status[Deployment]:
    """Put a ready deployment to sleep at its sleep level (400: not ready, requests in flight, or its engine was
    started without sleep mode); it shows sleeping, then asleep."""
    dep = get_object_or_404(Deployment, pk=pk)
    idle_actions.sleep_by_hand(dep)
    return Status(202, dep)


@router.post("/deployments/{pk}/wake", response={202: DeploymentOut})
def wake_deployment(
    request: HttpRequest, pk: int, make_room: bool = False, data: RoomIn | None = None
) -> Status[Deployment]:
    """Wake a deployment asleep or stopped to save (400 for one in another state), putting idle deployments aside
    for it by their idle policy, or with ``make_room`` true (body or query) also those whose policy is stay (the
    admin's consent). One that finds no room stays as it was, its state reason saying why ("Not woken: ...")."""
    dep = get_object_or_404(Deployment, pk=pk)
    idle_actions.wake_by_hand(dep, make_room=make_room or bool(data and data.make_room))
    # the answer's reason is the ask's, not the last one's: a check's 202 echoed a "Not woken: …" of minutes before
    dep.state_reason = f"Wake asked: the worker wakes it or says why not (GET /api/deployments/{dep.pk} follows it)."
    return Status(202, dep)


class EndpointIn(Body):
    """An engine Hearth did not launch: its base URL (``http(s)://host:port``, its OpenAI API below ``/v1``), its
    kind (vllm, sglang, llama.cpp, ollama, openai) and the key it demands, if any (stored sealed, never shown)."""

    base_url: str
    engine_kind: str = "openai"
    api_key: str = ""


class ExternalIn(EndpointIn):
    model: str = Field("", description="The endpoint's model to serve, as it lists it (default: its only one).")
    name: str = Field("", description="The deployment's name (default: the model's).")


@router.post("/external-deployments", response={201: DeploymentOut})
def register_external(request: HttpRequest, data: ExternalIn) -> Status[Deployment]:
    """Register an engine Hearth did not launch as a deployment, served under the name it lists its model by.
    400, nothing saved, when the endpoint cannot be reached, fails TLS, is not OpenAI-compatible or its model
    name is taken."""
    return Status(201, external.register(**data.dict()))


@router.post("/deployments/{pk}/endpoints", response={201: DeploymentOut})
def add_endpoint(request: HttpRequest, pk: int, data: EndpointIn) -> Status[Deployment]:
    """Add an engine Hearth did not launch to the deployment as one more replica (it must serve the deployment's
    served model name); routed beside the others with the same prefix affinity and failover."""
    dep = get_object_or_404(Deployment, pk=pk)
    external.add_endpoint(dep, **data.dict())
    return Status(201, dep)


@router.delete("/deployments/{pk}/endpoints/{replica_id}", response={204: None})
def remove_endpoint(request: HttpRequest, pk: int, replica_id: int) -> Status[None]:
    """Unregister one endpoint Hearth did not launch (its engine runs on, unrouted)."""
    external.remove_endpoint(get_object_or_404(Deployment, pk=pk), replica_id)
    return Status(204, None)


class ChangeIn(Body, IdleChange):
    """The settings to change; one left out keeps its current value. The idle settings and the serving limits
    (``max_tokens_cap``, ``fit_max_tokens``) act at once (a change of them alone recreates nothing); the rest as
    console.deployments.changes says."""

    max_model_len: Integer | None = None
    kv_space_gib: StrictFloat | None = None
    kv_cache_dtype: str | None = None
    gpu_memory_utilization: StrictFloat | None = None
    tensor_parallel_size: Integer | None = None
    max_num_seqs: Integer | None = None
    extra_args: Flags | None = None
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    fit_max_tokens: StrictBool | None = None
    max_tokens_cap: Integer | None = Field(
        None, description="Tokens a request may generate here, whatever it asks; null given: no cap. Acts at once."
    )
    replica_count: Integer | None = None
    confirm: StrictBool = False

    def limits(self, dep: Deployment) -> dict[str, Any]:
        """The deployment's serving limits with those given over them (a ``max_tokens_cap`` given as null
        clears the cap), checked; an empty dict when none is given."""
        given = self.dict(include={"fit_max_tokens"}, exclude_none=True)
        if "max_tokens_cap" in self.model_fields_set:
            given["max_tokens_cap"] = self.max_tokens_cap
        if not given:
            return {}
        new = serving_limits(dep) | given
        check_max_tokens_cap(new["max_tokens_cap"])
        return new


class ChangePreviewOut(Schema):
    plan: dict[str, object]
    recreate: bool
    downtime_seconds: float | None
    scale: tuple[int, int] | None = Field(
        None, description="[replicas now, then] when only the count changes, in place"
    )

    @staticmethod
    def resolve_plan(preview: changes.ChangePreview) -> dict[str, object]:
        return preview.plan.to_json()


@router.post("/deployments/{pk}/change", response={200: ChangePreviewOut, 202: DeploymentOut})
def change_deployment(request: HttpRequest, pk: int, data: ChangeIn) -> Status[Any]:
    """Preview new settings (200: the plan, whether the running engine is recreated, the expected
    downtime in seconds); with ``confirm`` apply them (202; a running deployment stops, then relaunches, but for a
    change of ``replica_count`` alone, made in place while the replicas serving keep serving, and for one of the
    idle settings and serving limits alone, which act at once)."""
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    given = data.dict(exclude={"confirm", *IDLE_FIELDS, *LIMIT_FIELDS}, exclude_none=True)
    idle, limits = data.dict(include=set(IDLE_FIELDS), exclude_none=True), data.limits(dep)
    current = changes.current_settings(dep)
    settings = current | given | {k: v for k, v in limits.items() if k in current}
    if idle:
        idle = merged(dep, idle)
    at_once = bool(idle or limits) and only_limits_differ(settings, current)  # nothing the engine runs with
    if not data.confirm:
        new = limits or serving_limits(dep)
        if at_once:
            return Status(200, changes.ChangePreview(plan_with(dep, **new), recreate=False, downtime_seconds=None))
        preview = changes.preview_change(dep, **settings)
        return Status(200, replace(preview, plan=judged(dep, preview.plan, **new)))
    with transaction.atomic():  # all or nothing; a recreate is sent once all is stored
        if idle:
            set_idle_settings(dep, **idle)
        if limits:
            set_serving_limits(dep, **limits)
        if not at_once:
            changes.apply_change(dep, **settings)
    return Status(202, dep)


@router.post("/deployments/{pk}/remedy", response={202: DeploymentOut})
def apply_remedy(request: HttpRequest, pk: int) -> Status[Deployment]:
    """Apply the out-of-memory remedy the deployment shows and launch it again (400 when none applies)."""
    dep = get_object_or_404(Deployment, pk=pk)
    remedy_actions.apply_remedy(dep)
    return Status(202, dep)


class ExportOut(Schema):
    target: str
    title: str
    follows: str
    filename: str
    offered: bool
    notes: list[str]
    text: str


@router.get("/deployments/{pk}/export", response=list[ExportOut])
def list_exports(request: HttpRequest, pk: int, gpus_per_node: int | None = None) -> list[Any]:
    """The deployment as cluster documents: production-stack Helm values, a KServe InferenceService and a
    LeaderWorkerSet, each offered (its YAML in ``text``) or with the reason it is not in ``notes``.
    ``gpus_per_node``: the cluster's GPUs per node (default: this box's). 400 when none can be made."""
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    return cluster_export.exports_of(dep, gpus_per_node)


@router.get("/deployments/{pk}/export/{target}")
def download_export(request: HttpRequest, pk: int, target: str, gpus_per_node: int | None = None) -> HttpResponse:
    """One target's file, as YAML to save (400 with the reason when it is not offered)."""
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    found = cluster_export.export_of(dep, target, gpus_per_node)
    response = HttpResponse(found.text, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{found.filename}"'
    return response
