"""Access's part of the JSON API: API keys (list, create with the key shown once, change limits, rotate,
revoke) and members (list, add, change role, state and limits). Roles: console.access.policy; members
reach only their own keys (403 for someone else's)."""

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema, Status
from pydantic import StrictBool

from console.access import keys, members
from console.access.key_activity import budget_words, with_activity, with_spent
from console.access.models import ApiKey, Member
from console.access.roles import role_of
from console.api_bodies import Body, Integer
from console.errors import ConsoleError

router = Router(tags=["keys", "members"])


class KeyIn(Body):
    name: str
    allowed_models: list[str] = Field(default_factory=list)
    max_tokens_cap: Integer | None = None
    expires_in_days: Integer | None = None
    requests_per_minute: Integer | None = None
    tokens_per_minute: Integer | None = None
    tokens_per_day: Integer | None = None
    max_concurrent: Integer | None = None
    daily_budget_usd: Decimal | None = None
    monthly_budget_usd: Decimal | None = None
    priority: str = ""  # interactive (admin-granted), standard or batch; "": the owner's default
    owner: str | None = None  # an admin's key for an active admin or member (their username); None: yourself


class KeyPatch(Body):
    """The limits and class to change; one left out keeps its value, one given as null removes it (a class: back to
    the owner's default)."""

    allowed_models: list[str] | None = None
    max_tokens_cap: Integer | None = None
    expires_at: datetime | None = None
    requests_per_minute: Integer | None = None
    tokens_per_minute: Integer | None = None
    tokens_per_day: Integer | None = None
    max_concurrent: Integer | None = None
    daily_budget_usd: Decimal | None = None
    monthly_budget_usd: Decimal | None = None
    priority: str | None = None


class KeyOut(Schema):
    id: int
    name: str
    prefix: str
    key: str


class RotateIn(Body):
    grace_seconds: Integer = 3600


class RotateOut(KeyOut):
    previous_valid_until: datetime


class KeyRow(Schema):
    id: int
    name: str
    prefix: str
    owner: str | None
    allowed_models: list[str]
    max_tokens_cap: int | None
    requests_per_minute: int | None
    tokens_per_minute: int | None
    tokens_per_day: int | None
    max_concurrent: int | None
    daily_budget_usd: Decimal | None
    monthly_budget_usd: Decimal | None
    priority: str  # the key's own class; "": its owner's default
    effective_priority: str  # the class its requests run at: its own, else its owner's default, else standard
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    rotated_at: datetime | None
    previous_valid_until: datetime | None
    revoked: bool
    requests_today: int
    tokens_today: int
    # USD charged (gateway.reservations), a number as GET /api/usage's; 0 when no request of the window ran (none
    # sent, or all refused or failed: charged nothing, as the keys page's $0.00); None: those that ran had no price
    cost_today: float | None
    requests_month: int
    tokens_month: int
    cost_month: float | None
    budget_refusal: str | None  # the latest refusal for a budget within 10 min today, without its countdown; None

    @staticmethod
    def resolve_cost_today(obj: ApiKey) -> Decimal | None:
        return _charged(obj, "today")

    @staticmethod
    def resolve_cost_month(obj: ApiKey) -> Decimal | None:
        return _charged(obj, "month")

    @staticmethod
    def resolve_budget_refusal(obj: ApiKey) -> str | None:
        """The 429's words with when the budget renews as a UTC time, not its countdown, which is stale once logged
        (a trial read "renews in 2,130,935 s" ten minutes on)."""
        return budget_words(getattr(obj, "budget_refusal", None)) or None

    @staticmethod
    def resolve_owner(obj: ApiKey) -> str | None:
        return obj.owner.get_username() if obj.owner else None

    @staticmethod
    def resolve_last_used_at(obj: ApiKey) -> datetime | None:
        return getattr(obj, "last_request_at", None) or obj.last_used_at

    @staticmethod
    def resolve_revoked(obj: ApiKey) -> bool:
        return obj.revoked_at is not None


def _charged(key: ApiKey, window: str) -> Decimal | None:
    """``key``'s cost over ``window`` ("today", "month"), as key_activity.with_activity annotated it (KeyRow)."""
    cost = getattr(key, f"cost_{window}")
    ran = getattr(key, f"requests_{window}") - getattr(key, f"refused_{window}") - getattr(key, f"failed_{window}")
    return Decimal(0) if cost is None and not ran else cost


@router.get("/keys", response=list[KeyRow])
def list_keys(request: HttpRequest) -> list[ApiKey]:
    """The keys you may see (all for admins and viewers, your own for members), without their secrets
    (Hearth keeps only their hashes), with today's and this month's requests and tokens (UTC)."""
    return list(with_activity(keys.visible_keys(request.user)).order_by("id"))


@router.post("/keys", response={201: KeyOut})
def create_key(request: HttpRequest, data: KeyIn) -> Status[dict[str, object]]:
    owner = None
    if data.owner is not None:
        people = get_user_model().objects
        owner = people.filter(username=data.owner).first()
        if owner is None:
            near = people.filter(username__iexact=data.owner).first()
            said = (
                f"did you mean {near.get_username()!r}? Usernames are case-sensitive."
                if near
                else "owner takes a username (GET /api/members)."
            )
            raise ConsoleError(f"No one here is named {data.owner!r}; {said}")
    row, key = keys.create_key(data.name, request.user, owner=owner, **data.dict(exclude={"name", "owner"}))
    return Status(201, {"id": row.pk, "name": row.name, "prefix": row.prefix, "key": key})


@router.patch("/keys/{pk}", response=KeyRow)
def update_key(request: HttpRequest, pk: int, data: KeyPatch) -> ApiKey:
    given = data.dict(exclude_unset=True)
    if "priority" in given and given["priority"] is None:
        given["priority"] = ""
    key = keys.set_key_limits(keys.manageable_key(request.user, pk), request.user, **given)
    return with_activity(ApiKey.objects.filter(pk=key.pk)).get()


@router.post("/keys/{pk}/rotate", response=RotateOut)
def rotate_key(request: HttpRequest, pk: int, data: RotateIn) -> dict[str, object]:
    """A new secret for the key (shown once); the old one is accepted for ``grace_seconds`` more."""
    key = keys.manageable_key(request.user, pk)
    secret = keys.rotate_key(key, request.user, data.grace_seconds)
    return {
        "id": key.pk,
        "name": key.name,
        "prefix": key.prefix,
        "key": secret,
        "previous_valid_until": key.previous_valid_until,
    }


@router.delete("/keys/{pk}", response={204: None})
def revoke_key(request: HttpRequest, pk: int) -> Status[None]:
    keys.revoke_key(keys.manageable_key(request.user, pk), request.user)
    return Status(204, None)


class MemberIn(Body):
    username: str
    password: str
    role: str = "member"


class MemberPatch(Body):
    """What to change; one left out keeps its value, a limit given as null removes it."""

    role: str | None = None
    is_active: StrictBool | None = None
    allowed_models: list[str] | None = None
    max_tokens_cap: Integer | None = None
    requests_per_minute: Integer | None = None
    tokens_per_minute: Integer | None = None
    tokens_per_day: Integer | None = None
    max_concurrent: Integer | None = None
    max_key_days: Integer | None = None
    max_keys: Integer | None = None
    daily_budget_usd: Decimal | None = None
    monthly_budget_usd: Decimal | None = None
    default_priority: str | None = None  # their keys' default class; null: standard


class MemberOut(Schema):
    id: int
    username: str
    role: str
    is_active: bool
    limits: dict[str, Any]
    # USD their keys were charged today (UTC), as their daily budget counts; 0 when none of their requests ran (as a
    # key's cost in GET /api/keys); None: those that ran had no price
    cost_today: float | None
    cost_month: float | None  # the same this calendar month (UTC); both from key_activity.with_spent

    @staticmethod
    def resolve_role(obj: Any) -> str:
        return str(role_of(obj))

    @staticmethod
    def resolve_cost_today(obj: Any) -> Decimal | None:
        return Decimal(0) if obj.cost_today is None and not obj.ran_today else obj.cost_today

    @staticmethod
    def resolve_cost_month(obj: Any) -> Decimal | None:
        return Decimal(0) if obj.cost_month is None and not obj.ran_month else obj.cost_month

    @staticmethod
    def resolve_limits(obj: Any) -> dict[str, Any]:
        """Their limits; budgets as a key's are given, USD strings to the cent ("25.00")."""
        member = Member.objects.filter(user=obj).first()
        limits = {name: getattr(member, name) if member else None for name in members.MEMBER_LIMITS}
        return {name: str(v) if isinstance(v, Decimal) else v for name, v in limits.items()}


def _with_spent(pk: int) -> Any:
    """The user ``pk`` as MemberOut reads one: with what their keys were charged (key_activity.with_spent)."""
    return with_spent(get_user_model().objects.filter(pk=pk)).get()


@router.get("/members", response=list[MemberOut])
def list_members(request: HttpRequest) -> list[Any]:
    return list(with_spent(get_user_model().objects.order_by("username")))


@router.post("/members", response={201: MemberOut})
def add_member(request: HttpRequest, data: MemberIn) -> Status[Any]:
    return Status(201, _with_spent(members.add_member(request.user, data.username, data.password, data.role).pk))


@router.patch("/members/{pk}", response=MemberOut)
def update_member(request: HttpRequest, pk: int, data: MemberPatch) -> Any:
    user = get_object_or_404(get_user_model(), pk=pk)
    given = data.dict(exclude_unset=True)
    with transaction.atomic():
        if given.get("role") is not None:
            members.set_role(request.user, user, given.pop("role"))
        if given.get("is_active") is not None:
            members.set_active(request.user, user, given.pop("is_active"))
        limits = {k: v for k, v in given.items() if k not in ("role", "is_active")}
        if "allowed_models" in limits:
            limits["allowed_models"] = limits["allowed_models"] or []
        if limits:
            members.set_member_limits(request.user, user, **limits)
    return _with_spent(user.pk)
