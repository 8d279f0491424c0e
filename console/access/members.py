"""Members: added by an admin (or at their first OIDC sign-in), given a role, limits on their keys, and
enabled or disabled. Each change is recorded in the audit log in its own transaction.

The appliance always keeps an active admin: the last one can be neither demoted nor disabled.
"""

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from console.access import key_limits
from console.access.keys import limits_of
from console.access.models import ApiKey, Member, Priority, Role
from console.access.roles import role_of
from console.audit.recording import changed, record
from console.errors import ConsoleError
from console.fanout import bump_routing_version
from console.names import INT_MAX

MAX_PASSWORD = 128  # as the members form takes it; hashing has no reason to take megabytes
MEMBER_LIMITS = (
    "allowed_models",
    *key_limits.INT_LIMITS,
    "max_key_days",
    "max_keys",
    *key_limits.BUDGETS,
    "default_priority",
)


def add_member(actor: Any, username: str, password: str, role: str) -> Any:
    """A new user with ``role``; returns the user. Raises ConsoleError for a taken or bad username, a
    password Django's validators refuse, or an unknown role."""
    role = _role(role)
    username = username.strip()
    if not username or len(username) > 150 or not username.isprintable():
        raise ConsoleError("Give a username of 1–150 printable characters.")
    users = get_user_model()
    try:
        users._meta.get_field("username").run_validators(username)  # as Django's own forms check it
    except ValidationError as exc:
        raise ConsoleError(" ".join(exc.messages)) from None
    if taken := users.objects.filter(username__iexact=username).first():
        raise ConsoleError(
            f"A user named {taken.get_username()!r} already exists; names that differ only in case would read as "
            "one person in the audit log."
        )
    if len(password) > MAX_PASSWORD:
        raise ConsoleError(f"A password may have at most {MAX_PASSWORD} characters.")
    try:
        validate_password(password)
    except ValidationError as exc:
        raise ConsoleError(" ".join(exc.messages)) from None
    try:
        with transaction.atomic():
            user = users.objects.create_user(username, "", password, is_superuser=role == Role.ADMIN)
            Member.objects.create(user=user, role=role)
            record(actor, "member.create", user, {"role": role})
    except IntegrityError:
        raise ConsoleError(f"A user named {username!r} already exists.") from None
    return user


def _priority(value: str | None) -> str:
    if value is None:
        return Priority.STANDARD.value
    if value not in Priority.values:
        raise ConsoleError(f"Unknown class {value!r}; choose interactive, standard or batch.")
    return value


def _role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        raise ConsoleError(f"Unknown role {role!r}; choose admin, member or viewer.") from None


def set_role(actor: Any, user: Any, role: str, why: str = "") -> None:
    """Give ``user`` ``role`` (admins are superusers); ``why`` goes into the audit entry. A viewer holds no live key
    (viewers look and act on nothing, their own keys included): made one, their live keys are revoked. Raises
    ConsoleError when it would leave no active admin."""
    role, before = _role(role), role_of(user)
    if role == before:
        return
    with transaction.atomic():
        if before == Role.ADMIN:
            _keep_an_admin(user)
        type(user).objects.filter(pk=user.pk).update(is_superuser=role == Role.ADMIN)
        Member.objects.update_or_create(user=user, defaults={"role": role})
        user.refresh_from_db()
        record(actor, "member.role", user, {"role": [before, role], **({"why": why} if why else {})})
        if role == Role.VIEWER:
            _revoke_keys(actor, user, "owner made a viewer")
        transaction.on_commit(bump_routing_version)


def _keep_an_admin(leaving: Any) -> None:
    others = type(leaving).objects.select_for_update(of=("self",)).filter(is_active=True).exclude(pk=leaving.pk)
    if not any(role_of(u) == Role.ADMIN for u in others.select_related("member")):
        raise ConsoleError(f"{leaving.get_username()} is the only active admin; make someone else admin first.")


def set_password(actor: Any, user: Any, password: str) -> None:
    """An admin sets ``user``'s password (one who forgot theirs): checked by Django's validators, audited as
    ``member.password`` with ``set_by_admin``; their sessions end (Django's session hash). Raises ConsoleError for a
    password refused, or an account from the identity provider (it has none here)."""
    if not user.has_usable_password():
        raise ConsoleError(f"{user.get_username()} signs in with single sign-on and has no password here.")
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise ConsoleError(" ".join(exc.messages)) from None
    with transaction.atomic():
        user.set_password(password)
        user.save(update_fields=["password"])
        record(actor, "member.password", user, {"set_by_admin": True})


def set_active(actor: Any, user: Any, active: bool) -> None:
    """Enable or disable ``user``. Disabling ends their sign-in and revokes their live keys."""
    if user.is_active == active:
        return
    with transaction.atomic():
        if not active and role_of(user) == Role.ADMIN:
            _keep_an_admin(user)
        type(user).objects.filter(pk=user.pk).update(is_active=active)
        user.refresh_from_db()
        record(actor, "member.active", user, {"is_active": [not active, active]})
        if not active:
            _revoke_keys(actor, user, "owner disabled")
        transaction.on_commit(bump_routing_version)


def _revoke_keys(actor: Any, user: Any, why: str) -> None:
    """Revoke ``user``'s live keys, each audited with ``why`` (inside the caller's transaction)."""
    for key in ApiKey.objects.select_for_update().filter(owner=user, revoked_at__isnull=True):
        ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
        record(actor, "key.revoke", key, {"prefix": key.prefix, "why": why})


def set_member_limits(actor: Any, user: Any, **limits: Any) -> Member:
    """Set ``user``'s limits (MEMBER_LIMITS; None: none) and lower their live keys to fit them; their keys' default
    class too (``default_priority``: interactive, standard or batch; None: standard).

    Raises ConsoleError for a value out of range.
    """
    if unknown := set(limits) - set(MEMBER_LIMITS):
        raise ConsoleError(f"Unknown member limit(s): {', '.join(sorted(unknown))}.")
    extra: dict[str, Any] = {name: limits.pop(name) for name in ("max_key_days", "max_keys") if name in limits}
    for name, value in extra.items():
        top = key_limits.MAX_DAYS if name == "max_key_days" else INT_MAX
        if value is not None and not 1 <= value <= top:
            raise ConsoleError(f"{name} must be from 1 to {top:,} (or empty for no limit).")
    if "default_priority" in limits:
        extra["default_priority"] = _priority(limits.pop("default_priority"))
    held = Member.objects.filter(user=user).values_list("allowed_models", flat=True).first() or []
    fields: dict[str, Any] = {**key_limits.checked(limits, held=held), **extra}
    with transaction.atomic():
        role = role_of(user) or Role.VIEWER
        member, _ = Member.objects.select_for_update().get_or_create(user=user, defaults={"role": role})
        budgets = {name: fields.get(name, getattr(member, name)) for name in key_limits.BUDGETS}
        key_limits.budgets_in_order(budgets["daily_budget_usd"], budgets["monthly_budget_usd"])
        before = {name: getattr(member, name) for name in fields}
        Member.objects.filter(pk=member.pk).update(**fields)
        member.refresh_from_db()
        if diff := changed(before, fields):
            record(actor, "member.limits", user, diff)
        _lower_keys(actor, member)
        transaction.on_commit(bump_routing_version)
    return member


def _lower_keys(actor: Any, member: Member) -> None:
    """Bring the member's live keys within their ceilings, recording each key that changed (an admin's
    keys have no ceilings)."""
    if role_of(member.user) == Role.ADMIN:
        return
    for key in ApiKey.objects.select_for_update().filter(owner=member.user, revoked_at__isnull=True):
        before = limits_of(key)
        after = key_limits.within_ceilings(member, before, clamp=True, key=key)
        if diff := changed(before, after):
            ApiKey.objects.filter(pk=key.pk).update(**after)
            record(actor, "key.limits", key, {**diff, "why": "member limits lowered"})
