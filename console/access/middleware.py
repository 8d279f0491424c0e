"""Enforces console.access.policy on every request Django routes: before the view runs, a request
nobody signed in to goes to the sign-in page (401 ``{"detail": ...}`` under /api), and one whose role
the table does not allow gets 403 (the page says so; /api answers ``{"detail": ...}``), and an /api method
the path does not serve 405 in that shape."""

import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import render

from console.access import policy
from console.access.roles import role_of

log = logging.getLogger(__name__)


class RoleMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> HttpResponseBase | None:
        match = request.resolver_match
        assert match is not None  # process_view runs only for a resolved URL
        method = request.method or "GET"
        operation = policy.api_operation(match, method)
        if operation is not None:
            served = policy.api_methods(operation.split(" ", 1)[1])
            if method not in served:  # HEAD too: django-ninja routes no HEAD, so it would get a bare 405 page
                resp = JsonResponse(
                    {"detail": f"{method} is not served here; use {', '.join(sorted(served))}."}, status=405
                )
                resp["Allow"] = ", ".join(sorted(served))
                return resp
        access = policy.allowed(match, method)
        if access == policy.PUBLIC:
            return None
        if not request.user.is_authenticated:
            if operation is not None:
                return JsonResponse(
                    {"detail": "Sign in first (log in at /login/; the API uses that session)."}, status=401
                )
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        role = role_of(request.user)
        if access is None:
            log.error("%s %s is not in console.access.policy: refused", method, match.view_name or match.route)
        if access is None or role not in access:
            return forbidden(request, operation is not None, _why(access, method, role))
        return None


def _why(access: policy.Access | None, method: str, role: object) -> str:
    if not access:  # not listed, or NOBODY
        return (
            "This address only takes a form sent from its page."
            if method in policy.SAFE_METHODS
            else ("This page takes no form.")
        )
    allowed = " and ".join(sorted(f"{r}s" for r in access))
    return f"This is for {allowed}; you are a {role}."


def forbidden(request: HttpRequest, api: bool, reason: str) -> HttpResponse:
    """403 in the caller's shape: ``{"detail": reason}`` for /api, else the console's page."""
    if api:
        return JsonResponse({"detail": reason}, status=403)
    return render(request, "access/forbidden.html", {"reason": reason}, status=403)
