"""Observability's pages: a deployment's live numbers, the fragment its page polls every 2 s (htmx)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from console.deployments.models import Deployment
from console.observability.panel import live_panel


@login_required
def deployment_panel(request: HttpRequest, pk: int) -> HttpResponse:
    """The live panel of one deployment: KV-cache use, running and waiting requests, tokens/s."""
    dep = get_object_or_404(Deployment, pk=pk)
    return render(request, "observability/panel.html", {"dep": dep, "panel": live_panel(dep)})
