"""The catalog's part of the JSON API: list, add and delete model sources, and the demo catalog's entries."""

from pathlib import PurePosixPath

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router, Schema, Status

from console.api_bodies import Body
from console.catalog import sources
from console.catalog.demo import demo_models
from console.catalog.models import ModelSource
from console.errors import ConsoleError

router = Router(tags=["models"])


class ModelIn(Body):
    name: str = ""  # "": the repo's or folder's own name (SmolLM2-135M-Instruct), the demo entry's with ``demo``
    path: str = ""
    repo_id: str = ""
    revision: str = "main"
    demo: str = ""  # a demo catalog entry, e.g. llama-3.1-70b (GET /api/models/demo lists them)


class ModelOut(Schema):
    id: int
    name: str
    kind: str
    source: str
    weights_bytes: int


@router.get("/models", response=list[ModelOut])
def list_models(request: HttpRequest) -> list[ModelSource]:
    return list(ModelSource.objects.order_by("name"))


class DemoOut(Schema):
    name: str
    repo_id: str
    architecture: str
    weights_bytes: int
    size_how: str
    size_source: str


@router.get("/models/demo", response=list[DemoOut])
def list_demo_models(request: HttpRequest) -> list[dict[str, object]]:
    """The demo catalog: published configurations with their checkpoint bytes, to plan and simulate."""
    return [
        {
            "name": d.name,
            "repo_id": d.repo_id,
            "architecture": d.shape,
            "weights_bytes": d.weights_bytes,
            "size_how": d.size_how,
            "size_source": d.size_source,
        }
        for d in demo_models()
    ]


@router.post("/models", response={200: ModelOut, 201: ModelOut})
def add_model(request: HttpRequest, data: ModelIn) -> Status[ModelSource]:
    """201 with the model added; 200 with the one a demo entry added before (the demo catalog's entries are added
    once)."""
    if sum(map(bool, (data.path, data.repo_id, data.demo))) > 1:
        raise ConsoleError("Give one of a local path, a Hugging Face repo_id or a demo catalog entry, not several.")
    # the name deployments pick the model by: given, else the last part of the repo id or the folder's path
    name = data.name.strip() or PurePosixPath(data.repo_id.strip() or data.path.strip().rstrip("/")).name
    if data.path:
        return Status(201, sources.add_local_model(name, data.path))
    if data.repo_id:
        return Status(201, sources.add_hf_model(name, data.repo_id, data.revision))
    if data.demo:
        model, added = sources.add_demo_model(data.demo)
        return Status(201 if added else 200, model)
    raise ConsoleError("Give a local path, a Hugging Face repo_id, or a demo catalog entry (demo).")


@router.delete("/models/{pk}", response={204: None})
def delete_model(request: HttpRequest, pk: int) -> Status[None]:
    sources.delete_model(get_object_or_404(ModelSource, pk=pk))
    return Status(204, None)
