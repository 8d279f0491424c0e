"""The JSON API under /api (django-ninja), for scripts and tests; the console pages use the same services.

Auth is the console's session (login first; send the CSRF token as X-CSRFToken). Errors a user can fix
answer 400 ``{"detail": message}``.
"""

import dataclasses
from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Field, NinjaAPI, Schema, Status
from ninja.errors import ValidationError
from ninja.security import django_auth

from console import apikeys, changes, services
from console.models import ApiKey, Deployment, ModelSource, Replica
from console.panel import live_panel
from console.services import ConsoleError
from engines.remedy import Change

api = NinjaAPI(title="Hearth", version="1", auth=django_auth, urls_namespace="api")


@api.exception_handler(ConsoleError)
def console_error(request: HttpRequest, exc: ConsoleError) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=400)


@api.exception_handler(ValidationError)
def invalid_input(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    """Malformed input answers like any other fixable error: 400 with one readable sentence."""
    problems = [f"{'.'.join(str(p) for p in e.get('loc', [])[1:])}: {e.get('msg')}" for e in exc.errors]
    return api.create_response(request, {"detail": "; ".join(problems) or "Invalid input."}, status=400)


class ModelIn(Schema):
    name: str
    path: str = ""
    repo_id: str = ""
    revision: str = "main"


class ModelOut(Schema):
    id: int
    name: str
    kind: str
    source: str
    weights_bytes: int


class PlanIn(Schema):
    model: str
    engine: str = "vllm-cpu"
    max_model_len: int = 0
    kv_space_gib: float = 1.0
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float = 0.0
    tensor_parallel_size: int = 0
    replica_count: int = 1
    max_num_seqs: int = 0

    def options(self) -> dict[str, Any]:
        return self.dict(exclude={"model", "engine", "name", "served_model_name", "extra_args", "max_tokens_cap"})


class DeploymentIn(PlanIn):
    name: str
    served_model_name: str = ""
    extra_args: list[str] = Field(default_factory=list)
    replica_count: int = 1
    max_tokens_cap: int | None = None


class ReplicaOut(Schema):
    runtime_name: str
    running: bool
    ready: bool
    exit_code: int | None
    oom_killed: bool
    restarts: int
    restart_at: datetime | None
    log_tail: str
    previous_log_tail: str
    previous_exit_code: int | None
    previous_oom_killed: bool

    @staticmethod
    def resolve_ready(obj: Replica) -> bool:
        return obj.running and obj.ready_at is not None


class ChangeOut(Schema):
    name: str
    before: str
    after: str
    why: str


class DeploymentOut(Schema):
    id: int
    name: str
    replica_count: int
    engine: str
    served_model_name: str
    state: str
    state_reason: str
    plan: dict[str, object]
    extra_args: list[str]
    engine_env: dict[str, str]
    engine_version: str
    engine_image: str
    gpu_model: str
    replicas: list[ReplicaOut]
    remedy: list[ChangeOut] | None

    @staticmethod
    def resolve_replicas(obj: Deployment) -> list[Replica]:
        return list(obj.replicas.order_by("pk"))

    @staticmethod
    def resolve_remedy(obj: Deployment) -> list[Change] | None:
        remedy = changes.remedy_for(obj)
        return remedy.changes if remedy else None


class KeyIn(Schema):
    name: str
    allowed_models: list[str] = Field(default_factory=list)
    max_tokens_cap: int | None = None
    expires_in_days: int | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None
    max_concurrent: int | None = None


class KeyOut(Schema):
    id: int
    name: str
    prefix: str
    key: str


def _model(name: str) -> ModelSource:
    model = ModelSource.objects.filter(name=name).first()
    if model is None:
        raise ConsoleError(f"No model named {name!r}.")
    return model


@api.get("/models", response=list[ModelOut])
def list_models(request: HttpRequest) -> list[ModelSource]:
    return list(ModelSource.objects.order_by("name"))


@api.post("/models", response={201: ModelOut})
def add_model(request: HttpRequest, data: ModelIn) -> Status[ModelSource]:
    if data.path and data.repo_id:
        raise ConsoleError("Give either a local path or a Hugging Face repo_id, not both.")
    if data.path:
        return Status(201, services.add_local_model(data.name, data.path))
    if data.repo_id:
        return Status(201, services.add_hf_model(data.name, data.repo_id, data.revision))
    raise ConsoleError("Give a local path or a Hugging Face repo_id.")


@api.post("/plan")
def plan(request: HttpRequest, data: PlanIn) -> dict[str, object]:
    return services.plan_for(_model(data.model), data.engine, **data.options())


@api.post("/deployments", response={201: DeploymentOut})
def create_deployment(request: HttpRequest, data: DeploymentIn) -> Status[Deployment]:
    return Status(
        201,
        services.create_deployment(
            name=data.name,
            model=_model(data.model),
            engine=data.engine,
            served_model_name=data.served_model_name,
            extra_args=data.extra_args,
            max_tokens_cap=data.max_tokens_cap,
            **data.options(),
        ),
    )


@api.get("/deployments", response=list[DeploymentOut])
def list_deployments(request: HttpRequest) -> list[Deployment]:
    return list(Deployment.objects.order_by("name"))


@api.delete("/deployments/{pk}", response={204: None})
def delete_deployment(request: HttpRequest, pk: int) -> Status[None]:
    services.delete_deployment(get_object_or_404(Deployment, pk=pk))
    return Status(204, None)


@api.delete("/models/{pk}", response={204: None})
def delete_model(request: HttpRequest, pk: int) -> Status[None]:
    services.delete_model(get_object_or_404(ModelSource, pk=pk))
    return Status(204, None)


@api.get("/deployments/{pk}", response=DeploymentOut)
def get_deployment(request: HttpRequest, pk: int) -> Deployment:
    return get_object_or_404(Deployment, pk=pk)


@api.post("/deployments/{pk}/launch", response={202: DeploymentOut})
def launch_deployment(request: HttpRequest, pk: int) -> Status[Deployment]:
    dep = get_object_or_404(Deployment, pk=pk)
    services.launch(dep)
    return Status(202, dep)


@api.post("/deployments/{pk}/stop", response={202: DeploymentOut})
def stop_deployment(request: HttpRequest, pk: int) -> Status[Deployment]:
    dep = get_object_or_404(Deployment, pk=pk)
    services.stop(dep)
    return Status(202, dep)


class ChangeIn(Schema):
    """The settings to change; one left out keeps its current value."""

    max_model_len: int | None = None
    kv_space_gib: float | None = None
    kv_cache_dtype: str | None = None
    gpu_memory_utilization: float | None = None
    tensor_parallel_size: int | None = None
    max_num_seqs: int | None = None
    extra_args: list[str] | None = None
    confirm: bool = False


class ChangePreviewOut(Schema):
    plan: dict[str, object]
    recreate: bool
    downtime_seconds: float | None


@api.post("/deployments/{pk}/change", response={200: ChangePreviewOut, 202: DeploymentOut})
def change_deployment(request: HttpRequest, pk: int, data: ChangeIn) -> Status[Any]:
    """Preview new settings (200: the plan, whether the running engine is recreated, the expected
    downtime in seconds); with ``confirm`` apply them (202; a running deployment stops, then relaunches)."""
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    given = data.dict(exclude={"confirm"}, exclude_none=True)
    settings = changes.current_settings(dep) | given
    if not data.confirm:
        return Status(200, changes.preview_change(dep, **settings))
    changes.apply_change(dep, **settings)
    return Status(202, dep)


@api.post("/deployments/{pk}/remedy", response={202: DeploymentOut})
def apply_remedy(request: HttpRequest, pk: int) -> Status[Deployment]:
    """Apply the out-of-memory remedy the deployment shows and launch it again (400 when none applies)."""
    dep = get_object_or_404(Deployment, pk=pk)
    changes.apply_remedy(dep)
    return Status(202, dep)


@api.get("/deployments/{pk}/metrics")
def deployment_metrics(request: HttpRequest, pk: int) -> dict[str, object]:
    """The live panel's numbers: canonical values (absent = no data), tokens/s, scrape age in seconds."""
    data = live_panel(get_object_or_404(Deployment, pk=pk))
    return {**dataclasses.asdict(data), "stale": data.stale}


class KeyRow(Schema):
    id: int
    name: str
    prefix: str
    allowed_models: list[str]
    max_tokens_cap: int | None
    revoked: bool


@api.get("/keys", response=list[KeyRow])
def list_keys(request: HttpRequest) -> list[dict[str, object]]:
    """Every key without its secret (Hearth keeps only its hash)."""
    return [
        {"id": k.pk, "name": k.name, "prefix": k.prefix, "allowed_models": k.allowed_models,
         "max_tokens_cap": k.max_tokens_cap, "revoked": k.revoked_at is not None}
        for k in ApiKey.objects.order_by("id")
    ]  # fmt: skip


@api.post("/keys", response={201: KeyOut})
def create_key(request: HttpRequest, data: KeyIn) -> Status[dict[str, object]]:
    row, key = apikeys.create_key(data.name, request.user, **data.dict(exclude={"name"}))
    return Status(201, {"id": row.pk, "name": row.name, "prefix": row.prefix, "key": key})


@api.delete("/keys/{pk}", response={204: None})
def revoke_key(request: HttpRequest, pk: int) -> Status[None]:
    apikeys.revoke_key(get_object_or_404(ApiKey, pk=pk))
    return Status(204, None)


class CheckOut(Schema):
    name: str
    ok: bool
    detail: str
    fix: str


class DoctorOut(Schema):
    host: str
    checked_at: str
    ok: bool
    checks: list[CheckOut]


class Detail(Schema):
    detail: str


@api.get("/doctor", response={200: DoctorOut, 503: Detail})
def doctor(request: HttpRequest) -> Status[dict[str, object]]:
    """The pre-flight checks as the worker ran them (waits up to HEARTH_DOCTOR_WAIT s): 503 when none answered."""
    from console.preflight import NoAnswer, worker_report

    try:
        return Status(200, worker_report().as_dict())
    except NoAnswer as exc:
        return Status(503, {"detail": str(exc)})
