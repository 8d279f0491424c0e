"""The JSON API under /api (django-ninja): one router per console domain, assembled here, for scripts and
tests; the console pages use the same domain functions.

Auth is the console's session (log in first; send the CSRF token as X-CSRFToken); what each role may call
is console.access.policy's table. Errors a user can fix answer 400 ``{"detail": message}``, a forbidden
one 403, and an unexpected one 500, all in that shape. A body holds only its operation's fields, and
numbers and booleans as JSON's own (console.api_bodies): an unknown field (a typo), ``true`` or ``"12"`` where a
number goes, or ``1`` or ``"yes"`` where a boolean goes, is a 400 naming the field, never ignored or read as 1,
12 or true.
"""

import json
import logging
import re
from collections.abc import Sequence

from django.apps import apps
from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError
from ninja.parser import Parser
from ninja.security import django_auth

from console.access.api import router as access
from console.alerts.api import router as alerts
from console.audit.api import router as audit
from console.capacity.api import router as capacity
from console.catalog.api import router as catalog
from console.deployments.api import router as deployments
from console.errors import ConsoleError
from console.observability.api import router as observability
from console.preflight.api import router as preflight
from console.usage.api import router as usage

log = logging.getLogger(__name__)


class BodyError(ValueError):
    """A request body that is not a JSON object Hearth can store; the message says why."""


class ObjectParser(Parser):
    """JSON bodies must be objects, and no string in them may hold a NUL character (PostgreSQL's text
    cannot, so one would otherwise fail deep in a query). No body at all reads as ``{}``: an operation whose fields
    are all optional (a launch's or a wake's ``make_room``) may be sent without one, and one with a required field
    says which is missing."""

    def parse_body(self, request: HttpRequest) -> dict[str, object]:
        if not request.body.strip() or (request.content_type == "multipart/form-data" and not request.POST):
            return {}  # none, or an empty form (what Django's test client and some tools send for no data)
        try:
            data = json.loads(request.body)
        except ValueError as exc:
            raise BodyError(f"The body is not valid JSON: {exc}.") from None
        if not isinstance(data, dict):
            raise BodyError("The body must be a JSON object.")
        if _has_nul(data):
            raise BodyError("Text must be printable: no NUL characters.")
        return data


def _has_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


api = NinjaAPI(title="Hearth", version="1", auth=django_auth, urls_namespace="api", parser=ObjectParser())
for router in (catalog, deployments, observability, access, preflight, usage, audit, capacity, alerts):
    api.add_router("", router)


@api.exception_handler(ConsoleError)
def console_error(request: HttpRequest, exc: ConsoleError) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=exc.status)


@api.exception_handler(ValidationError)
def invalid_input(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    """Malformed input answers like any other fixable error: 400 with one readable sentence."""
    problems = [f"{_field(e.get('loc', ()))}{e.get('msg')}" for e in exc.errors]
    return api.create_response(request, {"detail": "; ".join(problems) or "Invalid input."}, status=400)


def _field(loc: Sequence[object]) -> str:
    """The field an error is about as the client wrote it, with a colon: ``("body", "data", "tags", 0)`` →
    "tags.0: " (django-ninja's where, "body", and the endpoint's argument, "data", are ours, not the client's);
    "" for the body as a whole."""
    parts = list(loc[1:])
    if loc and loc[0] == "body":
        parts = parts[1:]
    return f"{'.'.join(str(p) for p in parts)}: " if parts else ""


# django-ninja's words for a session request that changes data without the CSRF token (ninja/security/apikey.py)
NINJA_CSRF_FAILED = "CSRF check Failed"
CSRF_FAILED = (
    "CSRF check failed: with the console's session, a request that changes data sends the csrftoken cookie's value "
    "in an X-CSRFToken header (docs/api.md)."
)


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    """ninja's HTTP errors; a body the parser refused says why rather than "Cannot parse request body", and a
    failed CSRF check names the header that passes it."""
    cause = exc.__cause__
    detail = str(cause) if isinstance(cause, BodyError) else str(exc)
    detail = CSRF_FAILED if exc.status_code == 403 and detail == NINJA_CSRF_FAILED else detail
    return api.create_response(request, {"detail": detail}, status=exc.status_code)


@api.exception_handler(Http404)
def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    """404 naming what is not there: get_object_or_404's "No ApiKey matches the given query." as "No api key with
    the id in /api/keys/999." (it answered a bare "Not Found"); any other Http404 with its own words."""
    found = re.fullmatch(r"No (\w+) matches the given query\.", str(exc))
    model = next((m for m in apps.get_models() if found and m.__name__ == found.group(1)), None)
    detail = f"No {model._meta.verbose_name} with the id in {request.path}." if model else str(exc)
    return api.create_response(request, {"detail": detail or f"Nothing at {request.path}."}, status=404)


@api.exception_handler(RequestDataTooBig)
def too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    """A body over Django's DATA_UPLOAD_MAX_MEMORY_SIZE: 413, not a bug's 500 and its traceback."""
    detail = f"The request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."
    return api.create_response(request, {"detail": detail}, status=413)


@api.exception_handler(PermissionDenied)
def forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "You may not do this."}, status=403)


@api.exception_handler(Exception)
def unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    """A bug answers in the API's shape too (logged with its traceback, never shown)."""
    log.exception("unexpected error in %s %s", request.method, request.path)
    return api.create_response(request, {"detail": "Internal error; the appliance's log has the details."}, status=500)
