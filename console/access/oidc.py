"""Optional sign-in through the company's OpenID Connect provider (mozilla-django-oidc, authorization code
flow with PKCE), on when HEARTH_OIDC_ISSUER and HEARTH_OIDC_CLIENT_ID are set.

The provider's endpoints come from its discovery document (``ISSUER/.well-known/openid-configuration``,
OpenID Connect Discovery 1.0 §4), read once per process. People are matched by the token's ``sub``
(kept on their Member row), never by a username a provider account could share with a local one. At
every sign-in their role follows the HEARTH_OIDC_ROLE_CLAIM claim (a string or a list, e.g. groups)
through HEARTH_OIDC_ROLES (``value=role`` pairs; the strongest role wins); with no mapped value they
get HEARTH_OIDC_DEFAULT_ROLE, or are refused when that is empty. API keys stay long-lived: a provider's
sign-in gives a console session, not a /v1 credential.
"""

import functools
import logging
from typing import Any

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from console.access.members import set_role
from console.access.models import Member, Role
from console.access.roles import role_of
from console.errors import ConsoleError

log = logging.getLogger(__name__)
STRENGTH = [Role.VIEWER, Role.MEMBER, Role.ADMIN]
DISCOVERED = {  # mozilla-django-oidc setting → discovery document field
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


def enabled() -> bool:
    return bool(settings.HEARTH_OIDC_ISSUER and settings.OIDC_RP_CLIENT_ID)


@functools.cache
def discovery(issuer: str) -> dict[str, Any]:
    """The provider's discovery document. Raises requests.RequestException when it cannot be read."""
    resp = requests.get(issuer.rstrip("/") + "/.well-known/openid-configuration", timeout=10)
    resp.raise_for_status()
    document: dict[str, Any] = resp.json()
    return document


def oidc_setting(attr: str, *default: Any) -> Any:
    """A mozilla-django-oidc setting; the provider's endpoints from discovery unless set outright."""
    if attr in DISCOVERED and not getattr(settings, attr, ""):
        return discovery(settings.HEARTH_OIDC_ISSUER)[DISCOVERED[attr]]
    return import_from_settings(attr, *default)


def role_for(claims: dict[str, Any]) -> Role | None:
    """The role the claims map to, the strongest of those mapped; the default role; or None (refused)."""
    value = claims.get(settings.HEARTH_OIDC_ROLE_CLAIM)
    values = value if isinstance(value, list) else [value] if value else []
    roles = [settings.HEARTH_OIDC_ROLES[v] for v in values if isinstance(v, str) and v in settings.HEARTH_OIDC_ROLES]
    if roles:
        return max((Role(r) for r in roles), key=STRENGTH.index)
    return Role(settings.HEARTH_OIDC_DEFAULT_ROLE) if settings.HEARTH_OIDC_DEFAULT_ROLE else None


class OidcBackend(OIDCAuthenticationBackend):  # type: ignore[misc]
    """mozilla-django-oidc's backend, matching by ``sub`` and mapping a claim to the role. It reads the
    provider's endpoints only when a callback brings a code (Django builds every backend for every
    password sign-in too, and those must not wait on the provider)."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.UserModel = get_user_model()

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        if request is None or not enabled() or "code" not in request.GET:
            return None
        try:
            super().__init__()  # the endpoints, from discovery
        except (requests.RequestException, ValueError, KeyError) as exc:
            log.warning("OIDC discovery at %s failed: %s", settings.HEARTH_OIDC_ISSUER, exc)
            return None
        return super().authenticate(request, **kwargs)

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        if not claims.get("sub"):
            return False
        if role_for(claims) is None:
            messages.error(
                self.request,
                f"Your account has no {settings.HEARTH_OIDC_ROLE_CLAIM} that Hearth maps "
                "to a role; ask an admin to give you access.",
            )
            return False
        return True

    def filter_users_by_claims(self, claims: dict[str, Any]) -> QuerySet[Any]:
        return get_user_model().objects.filter(member__oidc_subject=claims["sub"])

    def create_user(self, claims: dict[str, Any]) -> Any:
        role = role_for(claims)
        assert role is not None  # verify_claims refused the others
        base = str(claims.get("preferred_username") or claims.get("email") or claims["sub"])[:140]
        users = get_user_model()
        username, n = base, 1
        while users.objects.filter(username=username).exists():  # a local user of that name keeps it
            n += 1
            username = f"{base}-{n}"
        with transaction.atomic():
            email = str(claims.get("email", ""))[:254]
            user = users.objects.create_user(username, email, is_superuser=role == Role.ADMIN)
            Member.objects.create(user=user, role=role, oidc_subject=claims["sub"])
        return user

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        role = role_for(claims)
        if role is not None and role != role_of(user):
            try:
                set_role(user, user, role, why="identity provider's claim")
            except ConsoleError as exc:
                log.warning("OIDC role of %s left as it was: %s", user.get_username(), exc)
        return user


class OidcStart(OIDCAuthenticationRequestView):  # type: ignore[misc]
    """Sends the browser to the provider; back to the sign-in page with the reason when it cannot."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, **kwargs: Any) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(**kwargs)  # endpoints read per request, in get

    def get(self, request: HttpRequest) -> HttpResponseBase:
        if not enabled():
            messages.error(request, "Single sign-on is not set up on this appliance.")
            return redirect("access:login")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = oidc_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except (requests.RequestException, ValueError, KeyError) as exc:
            log.warning("OIDC discovery at %s failed: %s", settings.HEARTH_OIDC_ISSUER, exc)
            messages.error(request, "The identity provider did not answer; try again, or sign in with a password.")
            return redirect("access:login")
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        response: HttpResponse = super().get(request)
        return response


class OidcCallback(OIDCAuthenticationCallbackView):  # type: ignore[misc]
    get_settings = staticmethod(oidc_setting)
