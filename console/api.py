"""The JSON API under /api (django-ninja): one router per console domain, assembled here, for scripts and
tests; the console pages use the same domain functions.

Auth is the console's session (log in first; send the CSRF token as X-CSRFToken); what each role may call
is console.access.policy's table. Errors a user can fix answer 400 ``{"detail": message}``, a forbidden
one 403, and an unexpected one 500, all in that shape.
"""

import logging

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import ValidationError
from ninja.security import django_auth

from console.access.api import router as access
from console.audit.api import router as audit
from console.catalog.api import router as catalog
from console.deployments.api import router as deployments
from console.errors import ConsoleError
from console.observability.api import router as observability
from console.preflight.api import router as preflight
from console.usage.api import router as usage

log = logging.getLogger(__name__)

api = NinjaAPI(title="Hearth", version="1", auth=django_auth, urls_namespace="api")
for router in (catalog, deployments, observability, access, preflight, usage, audit):
    api.add_router("", router)


@api.exception_handler(ConsoleError)
def console_error(request: HttpRequest, exc: ConsoleError) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=400)


@api.exception_handler(ValidationError)
def invalid_input(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    """Malformed input answers like any other fixable error: 400 with one readable sentence."""
    problems = [f"{'.'.join(str(p) for p in e.get('loc', [])[1:])}: {e.get('msg')}" for e in exc.errors]
    return api.create_response(request, {"detail": "; ".join(problems) or "Invalid input."}, status=400)


@api.exception_handler(PermissionDenied)
def forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "You may not do this."}, status=403)


@api.exception_handler(Exception)
def unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    """A bug answers in the API's shape too (logged with its traceback, never shown)."""
    log.exception("unexpected error in %s %s", request.method, request.path)
    return api.create_response(request, {"detail": "Internal error; the appliance's log has the details."}, status=500)
