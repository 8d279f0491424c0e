"""The answers Django gives when no view does (handler404, handler500 in console.urls): in the JSON API's
shape under /api/, Django's own pages elsewhere."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"No API operation at {request.path[:200]}; /api/docs lists them."},
                            status=404)  # fmt: skip
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Internal error; the appliance's log has the details."}, status=500)
    return defaults.server_error(request)
