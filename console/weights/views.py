"""The weights cache page (admins): the models on disk with their size and the deployments that use them, and a
button that frees the space of one no deployment needs."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from console.errors import ConsoleError
from console.templatetags.byte_units import iec
from console.weights import cache
from console.weights.fetching import hub_cache


@login_required
def cache_page(request: HttpRequest) -> HttpResponse:
    context = {"report": cache.scan(), "folder": hub_cache(), "volume": settings.HEARTH_WEIGHTS_VOLUME}
    return render(request, "weights/cache.html", context)


@login_required
@require_POST
def cache_free(request: HttpRequest) -> HttpResponse:
    repo_id = request.POST.get("repo_id", "")
    try:
        freed = cache.free(repo_id)
    except ConsoleError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Freed {iec(freed) or '0 bytes'}: {repo_id} is no longer in the weights cache.")
    return redirect("weights:cache")
