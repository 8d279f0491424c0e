"""The JSON API under /api (django-ninja): one router per console domain, assembled here, for scripts and
tests; the console pages use the same domain functions.

Auth is the console's session (log in first; send the CSRF token as X-CSRFToken). Errors a user can fix
answer 400 ``{"detail": message}``.
"""

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import ValidationError
from ninja.security import django_auth

from console.access.api import router as access
from console.capacity.api import router as capacity
from console.catalog.api import router as catalog
from console.deployments.api import router as deployments
from console.errors import ConsoleError
from console.observability.api import router as observability
from console.preflight.api import router as preflight

api = NinjaAPI(title="Hearth", version="1", auth=django_auth, urls_namespace="api")
for router in (catalog, deployments, observability, access, preflight, capacity):
    api.add_router("", router)


@api.exception_handler(ConsoleError)
def console_error(request: HttpRequest, exc: ConsoleError) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=400)


@api.exception_handler(ValidationError)
def invalid_input(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    """Malformed input answers like any other fixable error: 400 with one readable sentence."""
    problems = [f"{'.'.join(str(p) for p in e.get('loc', [])[1:])}: {e.get('msg')}" for e in exc.errors]
    return api.create_response(request, {"detail": "; ".join(problems) or "Invalid input."}, status=400)
