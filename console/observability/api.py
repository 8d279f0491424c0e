"""Observability's part of the JSON API: a deployment's live numbers."""

from decimal import Decimal

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router

from console.deployments.models import Deployment
from console.observability.panel import live_panel

router = Router(tags=["metrics"])


@router.get("/deployments/{pk}/metrics")
def deployment_metrics(request: HttpRequest, pk: int) -> dict[str, object]:
    """The live panel's numbers: canonical values (absent = no data, ``reasons`` says why), tokens/s over the
    throughput window, the last good scrape's age in seconds (None: none), stale, each replica's scrape
    health, user-visible TTFT and ITL percentiles (seconds; served requests of the latency window and the
    requests running now that have them), the requests running now at the gateway (None: not known), the
    window's finished requests by outcome, the service's error rate and the refusal rate (0–1, of those that
    ended; None: none ended), $/hour, the cost per million tokens at the last 5 minutes' use (None: no price or
    idle) and the price charged per million input and output tokens (None: no price) with where it comes from
    (``charged_from``: admin, capacity, plan; "" none; console.observability.pricing)."""
    p = live_panel(get_object_or_404(Deployment, pk=pk))
    per_million = p.usd_per_million
    return {
        "values": p.values,
        "reasons": p.reasons,
        "age_seconds": p.age_seconds,
        "stale": p.stale,
        "generation_tokens_per_second": p.values.get("generation_tokens_per_second"),
        "tokens_per_second": p.tokens_per_second,
        "replicas": [
            {
                "id": r.replica_id,
                "age_seconds": r.age_seconds,
                "failures": r.failures,
                "error": r.error,
                "series": r.series,
                "flavor": r.flavor,
                "fresh": r.fresh,
            }
            for r in p.replicas
        ],
        "user_ttft": p.requests.ttft_q,
        "user_itl": p.requests.itl_q,
        "requests": p.requests.outcomes,
        "running": p.requests.running,
        "error_rate": p.requests.error_rate,
        "refusal_rate": p.requests.refusal_rate,
        "usd_per_hour": None if p.cost is None or p.cost.usd_per_hour is None else str(p.cost.usd_per_hour),
        "usd_per_million_tokens": None if per_million is None else str(per_million),
        "charged_usd_per_million_input": _text(p.charged.input_per_million if p.charged else None),
        "charged_usd_per_million_output": _text(p.charged.output_per_million if p.charged else None),
        "charged_from": p.charged.source if p.charged else "",
    }


def _text(value: Decimal | None) -> str | None:
    return None if value is None else str(value)
