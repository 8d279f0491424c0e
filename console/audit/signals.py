"""Sign-ins, sign-outs, failed sign-ins and lockouts into the audit log, from Django's auth signals and
django-axes' ``user_locked_out``. A failed sign-in records the username tried, never the password."""

from typing import Any

from axes.signals import user_locked_out
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest

from console.audit.recording import record


@receiver(user_logged_in)
def signed_in(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    backend = getattr(user, "backend", "") or ""
    record(user, "signin", user, {"method": "oidc" if "oidc" in backend.lower() else "password"}, request)


@receiver(user_logged_out)
def signed_out(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if user is not None:
        record(user, "signout", user, {}, request)


@receiver(user_login_failed)
def sign_in_failed(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any) -> None:
    record(None, "signin.failed", str(credentials.get("username", ""))[:150], {}, request)


@receiver(user_locked_out)
def locked_out(
    sender: Any, request: HttpRequest | None, username: str | None, ip_address: str | None, **kwargs: Any
) -> None:
    record(None, "signin.lockout", (username or "")[:150], {"ip_address": ip_address}, request)
