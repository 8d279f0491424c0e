"""Observability's part of the JSON API: a deployment's live numbers, and the Costs page's prices (GPU prices, each
deployment's price per million tokens), set with that page's forms and audit entries."""

from datetime import datetime
from decimal import Decimal

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router, Schema

from console.api_bodies import Body
from console.deployments.models import Deployment, DeploymentState
from console.errors import form_refusal
from console.observability import pricing
from console.observability.cost import hourly_cost
from console.observability.forms import DeploymentPriceForm, PriceForm
from console.observability.models import PriceSetting
from console.observability.panel import Panel, live_panel

router = Router(tags=["metrics"])


@router.get("/deployments/{pk}/metrics")
def deployment_metrics(request: HttpRequest, pk: int) -> dict[str, object]:
    """The live panel's numbers: canonical values (absent = no data, ``reasons`` says why), tokens/s over the
    throughput window, the last good scrape's age in seconds (None: none), stale, each replica's scrape
    health, user-visible TTFT and ITL percentiles (seconds; served requests of the latency window and the
    requests running now that have them), the requests running now at the gateway (None: not known), the
    window's finished requests by outcome, the service's error rate and the refusal rate (0–1, of those that
    ended; None: none ended), $/hour (``usd_per_hour``: its GPUs' price while it serves; ``charged_per_hour_now``:
    what it is charged now, "0" while it is asleep, waking, going to sleep or not running, as the dashboard's "not
    charged"), the cost per million tokens at the last 5 minutes' use (None: no price or
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
        "charged_per_hour_now": _charged_now(p),
        "usd_per_million_tokens": None if per_million is None else str(per_million),
        "charged_usd_per_million_input": _text(p.charged.input_per_million if p.charged else None),
        "charged_usd_per_million_output": _text(p.charged.output_per_million if p.charged else None),
        "charged_from": p.charged.source if p.charged else "",
    }


def _charged_now(p: Panel) -> str | None:
    """``p``'s $/hour where its engines serve, "0" where they do not (console.observability.cost: GPU time is the
    time between its scrapes, and one asleep or stopped is not scraped); None: no price."""
    if p.cost is None or p.cost.usd_per_hour is None:
        return None
    return str(p.cost.usd_per_hour) if p.dep.state == DeploymentState.READY else "0"


def _text(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


class GpuPriceIn(Body):
    """A GPU model's price, as the Costs page's form takes it; a model already listed is updated."""

    gpu_model: str  # as NVML names it ("NVIDIA H100 80GB HBM3"), at most 100 characters
    usd_per_gpu_hour: Decimal  # USD per GPU per hour: 0 or more, at most 4 decimal places (a number or its digits)
    source: str = ""  # where the price comes from, at most 300 characters


class GpuPriceOut(Schema):
    gpu_model: str
    usd_per_gpu_hour: Decimal  # USD per GPU per hour, as a string ("2.5000")
    source: str
    updated_at: datetime


@router.get("/gpu-prices", response=list[GpuPriceOut], tags=["prices"])
def list_gpu_prices(request: HttpRequest) -> list[PriceSetting]:
    """The GPU prices set (the Costs page's table), by GPU model: a deployment's $/hour is its GPUs' count × the price
    of the longest GPU model named in the inventory it was planned on (console.observability.cost)."""
    return list(PriceSetting.objects.order_by("gpu_model"))


@router.post("/gpu-prices", response=GpuPriceOut, tags=["prices"])
def set_gpu_price(request: HttpRequest, data: GpuPriceIn) -> PriceSetting:
    """Set a GPU model's price (admins), creating it or updating the one listed, with the Costs page's rules (PriceForm:
    a negative price, one past 4 decimal places or 6 digits before the point, and a model name over 100 characters
    are a 400 naming the field) and its audit entry (``price.set``; none when nothing changed). Answers 200 with the
    row. Published prices follow at the next scrape, as after the page's form."""
    fields = {"gpu_model": data.gpu_model, "usd_per_gpu_hour": str(data.usd_per_gpu_hour), "source": data.source}
    form = PriceForm(fields, instance=PriceSetting.objects.filter(gpu_model=data.gpu_model).first())
    if not form.is_valid():
        raise form_refusal(form)
    return pricing.save_gpu_price(form)


class DeploymentPriceOut(Schema):
    """A deployment's row of the Costs page: its GPUs and $/hour (None: ``hourly_reason`` says why), and the price it
    charges per million input and output tokens (None both: no price) with where it comes from (``source``: admin,
    capacity, plan; "" none: console.observability.pricing) in words, and the tokens/s it divides by."""

    id: int
    name: str
    gpus: int
    gpu_model: str
    usd_per_hour: Decimal | None
    hourly_reason: str
    usd_per_million_input: Decimal | None
    usd_per_million_output: Decimal | None
    source: str
    words: str
    tokens_per_second: float | None


def _deployment_price(dep: Deployment, prices: list[PriceSetting]) -> dict[str, object]:
    hourly, charged = hourly_cost(dep, prices), pricing.charged_price(dep, prices)
    return {
        "id": dep.pk,
        "name": dep.name,
        "gpus": hourly.gpus,
        "gpu_model": hourly.gpu_model,
        "usd_per_hour": hourly.usd_per_hour,
        "hourly_reason": hourly.reason,
        "usd_per_million_input": charged.input_per_million,
        "usd_per_million_output": charged.output_per_million,
        "source": charged.source,
        "words": charged.words,
        "tokens_per_second": charged.tokens_per_second,
    }


@router.get("/deployment-prices", response=list[DeploymentPriceOut], tags=["prices"])
def list_deployment_prices(request: HttpRequest) -> list[dict[str, object]]:
    """Each deployment's $/hour and charged price, by name, as the Costs page shows them."""
    prices = list(PriceSetting.objects.order_by("gpu_model"))
    return [_deployment_price(d, prices) for d in Deployment.objects.order_by("name")]


class DeploymentPriceIn(Body):
    """An admin's price, USD per million tokens, each 0 or more with at most 4 decimal places (a number or its digits).
    ``usd_per_million_output`` left out or null: the input price. Both null: back to the price from the deployment's
    capacity. An output price without an input price is refused."""

    usd_per_million_input: Decimal | None
    usd_per_million_output: Decimal | None = None


# DeploymentPriceForm's fields → this API's
_PRICE_FIELDS = {"input_usd": "usd_per_million_input", "output_usd": "usd_per_million_output"}


@router.put("/deployments/{pk}/price", response=DeploymentPriceOut, tags=["prices"])
def set_deployment_price(request: HttpRequest, pk: int, data: DeploymentPriceIn) -> dict[str, object]:
    """Set the price ``pk`` charges (admins), with the Costs page's rules (DeploymentPriceForm) and its audit entry
    (``deployment.price``), published to the gateway at once; answers the deployment's row as GET
    /api/deployment-prices gives it."""
    dep = get_object_or_404(Deployment, pk=pk)
    given = {"input_usd": data.usd_per_million_input, "output_usd": data.usd_per_million_output}
    form = DeploymentPriceForm({"deployment": dep.pk} | {k: "" if v is None else str(v) for k, v in given.items()})
    if not form.is_valid():
        raise form_refusal(form, _PRICE_FIELDS)
    paid_in, paid_out = form.cleaned_data["input_usd"], form.cleaned_data["output_usd"]
    pricing.set_price(dep, paid_in, paid_out)
    return _deployment_price(dep, list(PriceSetting.objects.all()))
