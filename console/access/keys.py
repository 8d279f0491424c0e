"""API keys: issued with their limits (shown once, stored hashed: console.access.key_format), rotated
(a new secret; the old one accepted for a grace period the owner chooses), changed and revoked. Each
is recorded in the audit log, in the same transaction as the change.

Every change bumps the routing version after it commits, so each gateway process sees it on its next
request. A key's limits must lie within its owner's ceilings (console.access.key_limits). Its class
(console.access.models.Priority) is its owner's to choose, but interactive is admin-granted (``checked_priority``).
"""

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q, QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone

from console.access import key_limits
from console.access.key_format import new_key
from console.access.models import ApiKey, Member, Priority, Role
from console.access.roles import is_admin, may_manage_key, may_see_all, role_of
from console.audit.recording import changed, record
from console.errors import ConsoleError
from console.fanout import bump_routing_version

MAX_GRACE_SECONDS = 30 * 86_400  # a rotation's old secret lives at most 30 days


def ceilings_for(owner: Any) -> Member | None:
    """The Member row whose ceilings bind ``owner``'s keys; None for an admin (no ceilings)."""
    if owner is None or is_admin(owner):
        return None
    return Member.objects.filter(user=owner).first()


def may_choose_interactive(actor: Any, owner: Any) -> bool:
    """Whether ``actor`` may give a key of ``owner`` the interactive class: an admin always; anyone else only when an
    admin made interactive the owner's member default."""
    if is_admin(actor):
        return True
    return Member.objects.filter(user=owner, default_priority=Priority.INTERACTIVE).exists()


def checked_priority(actor: Any, owner: Any, priority: str) -> str:
    """``priority`` for a key of ``owner`` set by ``actor``: "" (the owner's default) or a class. Raises ConsoleError
    for an unknown class, or interactive where ``may_choose_interactive`` says no."""
    if priority not in ("", *Priority.values):
        raise ConsoleError(
            f"Unknown class {priority!r}; choose interactive, standard or batch (or empty for the owner's default)."
        )
    if priority == Priority.INTERACTIVE and not may_choose_interactive(actor, owner):
        raise ConsoleError("Only an admin grants the interactive class; choose standard or batch.")
    return priority


def limits_of(key: ApiKey) -> dict[str, Any]:
    """The key's limits, as key_limits.LIMITS names them."""
    return {name: getattr(key, name) for name in key_limits.LIMITS}


def create_key(
    name: str,
    user: Any,
    *,
    owner: Any = None,
    allowed_models: list[str] | None = None,
    expires_in_days: int | None = None,
    priority: str = "",
    **limits: Any,
) -> tuple[ApiKey, str]:
    """A new API key made by ``user`` for ``owner`` (None: themself; someone else only by an admin, for an active
    admin or member); returns (row, key). The key is in no row and no log: show it once.

    ``allowed_models`` (served model names; empty: all), ``expires_in_days``, and the limits of
    key_limits.INT_LIMITS and BUDGETS (None: none) limit it, within the owner's ceilings; ``priority`` is its
    class ("" the owner's default; ``checked_priority``). Raises ConsoleError for a bad name, limit, class or owner,
    or when the owner already holds their most live keys.
    """
    name = _checked_name(name)
    owner = _checked_owner(user, owner)
    if unknown := set(limits) - {*key_limits.INT_LIMITS, *key_limits.BUDGETS}:
        raise ConsoleError(f"Unknown key limit(s): {', '.join(sorted(unknown))}.")
    wanted = {**dict.fromkeys(key_limits.LIMITS), **limits, "allowed_models": allowed_models or []}
    wanted["expires_at"] = key_limits.expiry(expires_in_days)
    member, whose = ceilings_for(owner), _whose(user, owner)
    fields = key_limits.within_ceilings(member, key_limits.checked(wanted), whose=whose)
    fields["priority"] = checked_priority(user, owner, priority)
    key, prefix, digest = new_key()
    with transaction.atomic():
        if member is not None and member.max_keys is not None:
            live = [k for k in ApiKey.objects.select_for_update().filter(owner=owner) if k.is_live()]
            if len(live) >= member.max_keys:
                holds = "You hold" if whose == "you" else f"{whose} holds"
                raise ConsoleError(
                    f"{holds} {len(live)} live key{'' if len(live) == 1 else 's'}, and the most allowed for {whose} "
                    f"is {member.max_keys}; "
                    "revoke one first."
                )
        row = ApiKey.objects.create(name=name, prefix=prefix, key_hash=digest, owner=owner, **fields)
        made = {k: v for k, v in fields.items() if v not in (None, [], "")}
        made |= {"owner": owner.get_username()} if owner != user else {}
        record(user, "key.create", row, {"prefix": prefix, **made})
        transaction.on_commit(bump_routing_version)
    return row, key


def _checked_owner(user: Any, owner: Any) -> Any:
    """The owner of a key ``user`` makes: themself when ``owner`` is None. Raises ConsoleError for someone else
    unless ``user`` is an admin, and for an owner who may hold no key (disabled, or a viewer)."""
    if owner is None or owner == user:
        return user
    if not is_admin(user):
        raise ConsoleError("Only an admin makes a key for someone else.")
    if not owner.is_active or role_of(owner) not in (Role.ADMIN, Role.MEMBER):
        raise ConsoleError(f"{owner.get_username()} may hold no key: only an active admin or member may.")
    return owner


def possible_owners() -> QuerySet[Any]:
    """Whom an admin may make a key for: active admins and members, by username."""
    people = get_user_model().objects.filter(is_active=True)
    return people.filter(Q(is_superuser=True) | Q(member__role__in=[Role.ADMIN, Role.MEMBER])).order_by("username")


def _whose(actor: Any, owner: Any) -> str:
    """Whom a limit's error names: "you" when ``actor`` acts for themself, else the owner's name."""
    return "you" if owner is None or actor == owner else owner.get_username()


def _checked_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 100 or not name.isprintable():
        raise ConsoleError("Give the key a name of 1–100 printable characters (who or what will use it).")
    return name


def rotate_key(key: ApiKey, actor: Any, grace_seconds: int) -> str:
    """Give ``key`` a new secret and return it (shown once). The old secret stays valid for
    ``grace_seconds`` (0: refused at once); a secret from an earlier rotation still in its grace is
    refused from now on. Raises ConsoleError for a revoked or expired key or a grace out of range."""
    if not 0 <= grace_seconds <= MAX_GRACE_SECONDS:
        raise ConsoleError(f"The grace period must be from 0 to {MAX_GRACE_SECONDS // 86_400} days.")
    secret, prefix, digest = new_key()
    now = timezone.now()
    with transaction.atomic():
        row = ApiKey.objects.select_for_update().get(pk=key.pk)
        if not row.is_live(now):
            raise ConsoleError(f"{row.name} is revoked or expired; create a new key instead.")
        until = now + timedelta(seconds=grace_seconds)
        old = row.prefix
        ApiKey.objects.filter(pk=row.pk).update(
            prefix=prefix,
            key_hash=digest,
            rotated_at=now,
            previous_prefix=old,
            previous_key_hash=row.key_hash,
            previous_valid_until=until,
        )
        key.refresh_from_db()
        record(
            actor,
            "key.rotate",
            key,
            {"prefix": [old, prefix], "old_secret_valid_until": until, "grace_seconds": grace_seconds},
        )
        transaction.on_commit(bump_routing_version)
    return secret


def set_key_limits(key: ApiKey, actor: Any, priority: str | None = None, **limits: Any) -> ApiKey:
    """Change some of ``key``'s limits (key_limits.LIMITS; ``expires_at`` a datetime or None), within its
    owner's ceilings, and its class when ``priority`` is given ("" the owner's default; ``checked_priority``).
    Raises ConsoleError for a bad limit or class or a revoked key."""
    if key.revoked_at is not None:
        raise ConsoleError(f"{key.name} is revoked; its limits no longer matter.")
    before = limits_of(key) | {"priority": key.priority}
    wanted = key_limits.checked({**limits_of(key), **limits}, held=before["allowed_models"])
    after = key_limits.within_ceilings(ceilings_for(key.owner), wanted, key=key, whose=_whose(actor, key.owner))
    if priority is not None and priority != key.priority:  # a class an admin granted is kept on other changes
        after["priority"] = checked_priority(actor, key.owner, priority)
    with transaction.atomic():
        ApiKey.objects.filter(pk=key.pk).update(**after)
        key.refresh_from_db()
        if diff := changed(before, after):
            record(actor, "key.limits", key, diff)
        transaction.on_commit(bump_routing_version)
    return key


def revoke_key(key: ApiKey, actor: Any = None) -> None:
    """Revoke at once: every gateway process drops it on its next request."""
    with transaction.atomic():
        if ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()):
            record(actor, "key.revoke", key, {"prefix": key.prefix})
        transaction.on_commit(bump_routing_version)


def manageable_key(user: Any, pk: int) -> ApiKey:
    """The key ``pk`` when ``user`` may manage it. Raises Http404 when there is none, PermissionDenied
    when it is someone else's and ``user`` is no admin."""
    key = get_object_or_404(ApiKey.objects.select_related("owner"), pk=pk)
    if not may_manage_key(user, key):
        raise PermissionDenied(
            "This key is someone else's; only its owner or an admin may change it, and a member sees only their own."
        )
    return key


def visible_keys(user: Any) -> QuerySet[ApiKey]:
    """The keys ``user`` may see: every key for admins and viewers, their own for members."""
    keys = ApiKey.objects.select_related("owner__member")
    return keys if may_see_all(user) else keys.filter(owner=user)
