"""System checks of the sign-in settings, so a mistake stops the start with its name (manage.py check)."""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from console.access.models import Role


@register()
def oidc_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    roles = set(Role.values)
    if bad := sorted(f"{v}={r}" for v, r in settings.HEARTH_OIDC_ROLES.items() if r not in roles):
        errors.append(
            Error(
                f"HEARTH_OIDC_ROLES maps to an unknown role: {', '.join(bad)}",
                hint="Use value=admin, value=member or value=viewer, comma-separated.",
                id="access.E001",
            )
        )
    if settings.HEARTH_OIDC_DEFAULT_ROLE and settings.HEARTH_OIDC_DEFAULT_ROLE not in roles:
        errors.append(
            Error(
                f"HEARTH_OIDC_DEFAULT_ROLE={settings.HEARTH_OIDC_DEFAULT_ROLE!r} is not a role",
                hint="Use admin, member, viewer, or leave it empty to refuse unmapped people.",
                id="access.E002",
            )
        )
    if settings.HEARTH_OIDC_ISSUER and not (settings.OIDC_RP_CLIENT_ID and settings.OIDC_RP_CLIENT_SECRET):
        errors.append(
            Error(
                "HEARTH_OIDC_ISSUER is set without HEARTH_OIDC_CLIENT_ID and HEARTH_OIDC_CLIENT_SECRET",
                hint="Register Hearth as a client at the provider, redirect URI /oidc/callback/.",
                id="access.E003",
            )
        )
    return errors
