"""A person's role: superusers are admins; everyone else has the role on their Member row (a viewer
without one). Members and viewers act only on what they own where ownership applies (API keys, usage)."""

from typing import Any

from console.access.models import ApiKey, Member, Role


def role_of(user: Any) -> Role | None:
    """The role of ``user``, or None when nobody is signed in."""
    if user is None or not user.is_authenticated:
        return None
    if user.is_superuser:
        return Role.ADMIN
    try:
        return Role(user.member.role)
    except Member.DoesNotExist:
        return Role.VIEWER


def is_admin(user: Any) -> bool:
    return role_of(user) == Role.ADMIN


def may_manage_key(user: Any, key: ApiKey) -> bool:
    """Admins manage every key; members their own; viewers none."""
    role = role_of(user)
    return role == Role.ADMIN or (role == Role.MEMBER and key.owner_id == user.pk)


def may_see_all(user: Any) -> bool:
    """Admins and viewers see every key and everyone's usage; members only their own."""
    return role_of(user) in (Role.ADMIN, Role.VIEWER)
