"""The catalog's part of the JSON API: list, add and delete model sources."""

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router, Schema, Status

from console.catalog import sources
from console.catalog.models import ModelSource
from console.errors import ConsoleError

router = Router(tags=["models"])


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


@router.get("/models", response=list[ModelOut])
def list_models(request: HttpRequest) -> list[ModelSource]:
    return list(ModelSource.objects.order_by("name"))


@router.post("/models", response={201: ModelOut})
def add_model(request: HttpRequest, data: ModelIn) -> Status[ModelSource]:
    if data.path and data.repo_id:
        raise ConsoleError("Give either a local path or a Hugging Face repo_id, not both.")
    if data.path:
        return Status(201, sources.add_local_model(data.name, data.path))
    if data.repo_id:
        return Status(201, sources.add_hf_model(data.name, data.repo_id, data.revision))
    raise ConsoleError("Give a local path or a Hugging Face repo_id.")


@router.delete("/models/{pk}", response={204: None})
def delete_model(request: HttpRequest, pk: int) -> Status[None]:
    sources.delete_model(get_object_or_404(ModelSource, pk=pk))
    return Status(204, None)
