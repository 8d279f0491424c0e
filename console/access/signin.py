"""Sign-in throttling with django-axes: the address it counts failures by, and the page a locked-out
attempt gets (429, in plain words, with how long the pause lasts)."""

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def client_ip(request: HttpRequest) -> str | None:
    """The client's address: REMOTE_ADDR, which appliance.transport_security has already taken from
    X-Forwarded-For when the request came through a trusted proxy."""
    return request.META.get("REMOTE_ADDR")


def locked_out(request: HttpRequest, response: HttpResponse | None = None, credentials: Any = None) -> HttpResponse:
    """The sign-in page's answer while a username is locked out from this address (HTTP 429)."""
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    context = {
        "username": str(username)[:150],
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "cooloff_minutes": minutes,
    }
    return render(request, "access/locked_out.html", context, status=429)
