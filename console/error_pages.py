"""The answers Django gives when no view does (handler404, handler500 in console.urls): in the JSON API's
shape under /api/ (and /v1/, should a request for the gateway ever reach Django), elsewhere a console page in
the console's layout, its navigation included, saying what was not there and linking back.

A 500 names an error id, the page's and its ``x-request-id`` header's, and logs it with the exception
(``server error <id> on <path>`` with the traceback), so the one line to look for in the appliance's log is known.

403 needs no handler here: Django's own permission_denied renders templates/403.html the same way.
"""

import logging
import re
import sys
import uuid

from django.http import HttpRequest, HttpResponse, HttpResponseServerError, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import requires_csrf_token

log = logging.getLogger(__name__)

# get_object_or_404's message (django/shortcuts.py): the model's class name tells what was missing
NO_OBJECT = re.compile(r"^No (\w+) matches the given query\.$")
# model class name → (what the console calls one, the URL name of their list, that list's link text)
THINGS = {
    "Deployment": ("deployment", "deployments:list", "Deployments"),
    "ApiKey": ("API key", "access:keys", "API keys"),
    "User": ("member", "access:members", "Members"),
    "CapacityRun": ("capacity check", "deployments:list", "Deployments"),
    "Tuning": ("tuning", "deployments:list", "Deployments"),
    "ModelSource": ("model", "catalog:models", "Models"),
}


def _json_404(request: HttpRequest) -> JsonResponse | None:
    """The JSON answer for /api/, and for /v1/ in the gateway's OpenAI shape (gateway.app answers /v1 itself; this
    is for a request that reaches Django anyway, as under the test client); None for a console page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"No API operation at {request.path[:200]}; /api/docs lists them."}, status=404)
    if request.path == "/v1" or request.path.startswith("/v1/"):
        error = {
            "message": f"Unknown endpoint {request.method} {request.path[:200]}.",
            "type": "invalid_request_error",
            "param": None,
            "code": "unknown_url",
        }
        return JsonResponse({"error": error}, status=404)
    return None


def missing(request: HttpRequest, exception: Exception | None) -> dict[str, str]:
    """What the 404 page says: ``{"what": sentence, "back_url": ..., "back_label": ...}``. "There is no
    deployment 9999; …" when a view looked a row up by id and found none; the view's own words when it said
    why (``Http404("Unknown range.")``); else that no page has this address."""
    message = str(exception.args[0]) if exception is not None and exception.args else ""
    match = request.resolver_match  # None when no URL pattern matched the path
    home = {"back_url": reverse("home"), "back_label": "Back to the dashboard"}
    if found := NO_OBJECT.match(message):
        noun, back, label = THINGS.get(found.group(1), (found.group(1), "home", "the dashboard"))
        pk = match.kwargs.get("pk") if match is not None else None
        what = f"There is no {noun} {pk}; it may have been deleted." if pk is not None else f"There is no such {noun}."
        return {"what": what, "back_url": reverse(back), "back_label": f"Back to {label}"}
    if match is not None and message:
        return {"what": message, **home}
    return {"what": f"There is no page at {request.path[:200]}.", **home}


@requires_csrf_token  # the layout's forms (log out) and htmx headers carry the token, as Django's own handlers do
def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    answer = _json_404(request)
    if answer is not None:
        return answer
    return render(request, "404.html", missing(request, exception), status=404)


@requires_csrf_token
def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 answer, naming the error id it logged the exception under (module docstring). Django calls it
    while the exception is being handled, so ``sys.exc_info()`` holds it."""
    error_id = uuid.uuid4().hex
    log.error("server error %s on %s %s", error_id, request.method, request.path[:200], exc_info=sys.exc_info())
    response = _server_error_answer(request, error_id)
    response["x-request-id"] = error_id
    return response


def _server_error_answer(request: HttpRequest, error_id: str) -> HttpResponse:
    if request.path.startswith(("/api/", "/v1/")):
        detail = f"Internal error {error_id}; the appliance's log has the details under that id."
        return JsonResponse({"detail": detail, "error_id": error_id}, status=500)
    try:  # the layout reads the session and the GPU inventory: what failed may be the database or Redis
        return render(request, "500.html", {"error_id": error_id}, status=500)
    except Exception:  # an error page that cannot fail: the plain one when the layout could not be drawn
        log.exception("the 500 page of error %s could not be drawn in the console's layout", error_id)
        return HttpResponseServerError(
            "<!doctype html><title>Server error · Hearth</title><h1>Server error</h1>"
            f"<p>Something went wrong; the appliance's log has the details under error id <code>{error_id}</code>. "
            '<a href="/">Back to the dashboard</a></p>'
        )
