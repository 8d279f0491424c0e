"""Template context for every console page: the signed-in person's role, so pages offer only what it allows."""

from django.http import HttpRequest

from console.access.models import Role
from console.access.roles import role_of


def roles(request: HttpRequest) -> dict[str, object]:
    role = role_of(getattr(request, "user", None))
    return {"role": role, "is_admin": role == Role.ADMIN, "holds_keys": role in (Role.ADMIN, Role.MEMBER)}
