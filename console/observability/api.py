"""Observability's part of the JSON API: a deployment's live numbers."""

import dataclasses

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router

from console.deployments.models import Deployment
from console.observability.panel import live_panel

router = Router(tags=["metrics"])


@router.get("/deployments/{pk}/metrics")
def deployment_metrics(request: HttpRequest, pk: int) -> dict[str, object]:
    """The live panel's numbers: canonical values (absent = no data), tokens/s, scrape age in seconds."""
    data = live_panel(get_object_or_404(Deployment, pk=pk))
    return {**dataclasses.asdict(data), "stale": data.stale}
