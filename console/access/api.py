"""Access's part of the JSON API: list, create (the key shown once) and revoke API keys."""

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema, Status

from console.access import keys
from console.access.models import ApiKey

router = Router(tags=["keys"])


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


class KeyRow(Schema):
    id: int
    name: str
    prefix: str
    allowed_models: list[str]
    max_tokens_cap: int | None
    revoked: bool


@router.get("/keys", response=list[KeyRow])
def list_keys(request: HttpRequest) -> list[dict[str, object]]:
    """Every key without its secret (Hearth keeps only its hash)."""
    return [
        {"id": k.pk, "name": k.name, "prefix": k.prefix, "allowed_models": k.allowed_models,
         "max_tokens_cap": k.max_tokens_cap, "revoked": k.revoked_at is not None}
        for k in ApiKey.objects.order_by("id")
    ]  # fmt: skip


@router.post("/keys", response={201: KeyOut})
def create_key(request: HttpRequest, data: KeyIn) -> Status[dict[str, object]]:
    row, key = keys.create_key(data.name, request.user, **data.dict(exclude={"name"}))
    return Status(201, {"id": row.pk, "name": row.name, "prefix": row.prefix, "key": key})


@router.delete("/keys/{pk}", response={204: None})
def revoke_key(request: HttpRequest, pk: int) -> Status[None]:
    keys.revoke_key(get_object_or_404(ApiKey, pk=pk))
    return Status(204, None)
