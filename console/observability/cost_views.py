"""The Costs page: GPU prices and each deployment's price per million tokens (an admin edits both), each key's cost
per day for the last 7 days (what its requests were charged: console.observability.cost), and a day's
reconciliation per deployment (console.observability.reconcile)."""

from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from console.deployments.models import Deployment
from console.observability import cost, pricing
from console.observability.forms import DeploymentPriceForm, PriceForm
from console.observability.models import PriceSetting
from console.observability.reconcile import reconcile_all
from console.observability.views import own_keys

DAYS_SHOWN = 7
FIRST_DAY = date.min + timedelta(days=1)  # the page links the day before the one it shows, which must exist


@login_required
def costs(request: HttpRequest) -> HttpResponse:
    """GET: the page (``?day=YYYY-MM-DD``: the reconciliation's day, default today, UTC). POST (admins): a GPU
    price, or with ``form=deployment_price`` a deployment's price per million tokens."""
    form, price_form = PriceForm(), DeploymentPriceForm()
    if request.method == "POST" and request.POST.get("form") == "deployment_price":
        price_form = DeploymentPriceForm(request.POST)
        if price_form.is_valid():
            return _set_deployment_price(request, price_form)
    elif request.method == "POST":
        instance = PriceSetting.objects.filter(gpu_model=request.POST.get("gpu_model", "")).first()
        form = PriceForm(request.POST, instance=instance)
        if form.is_valid():
            pricing.save_gpu_price(form)
            messages.success(request, f"Price for {form.cleaned_data['gpu_model']} saved.")
            return redirect("observability:costs")
    today = datetime.now(UTC).date()
    asked = request.GET.get("day", "").strip()
    day = _day(asked, today)
    if asked and day.isoformat() != asked[:10]:  # not a day, one to come or before FIRST_DAY: say which is shown
        said = f"{asked[:40]!r} is not a past day (YYYY-MM-DD, from {FIRST_DAY.isoformat()})"
        messages.warning(request, f"{said}; showing {day:%Y-%m-%d}.")
    own = own_keys(request)
    days = [
        (today - timedelta(days=n), cost.visible_to(cost.key_costs(today - timedelta(days=n)), own))
        for n in range(DAYS_SHOWN)
    ]
    prices = list(PriceSetting.objects.order_by("gpu_model"))
    deployments = [
        (d, cost.hourly_cost(d, prices), pricing.charged_price(d, prices)) for d in Deployment.objects.order_by("name")
    ]
    context = {
        "prices": prices,
        "form": form,
        "price_form": price_form,
        "days": days,
        "deployments": deployments,
        "any_key_costs": any(rows for _, rows in days),
        "day": day,
        "previous_day": day - timedelta(days=1),
        "next_day": day + timedelta(days=1) if day < today else None,
        "reconciliations": reconcile_all(day, own),
        "batch_factor_pct": f"{settings.HEARTH_BATCH_PRICE_FACTOR * 100:g} %",
    }
    return render(request, "observability/costs.html", context, status=400 if price_form.errors else 200)


def _set_deployment_price(request: HttpRequest, form: DeploymentPriceForm) -> HttpResponse:
    dep, paid_in, paid_out = (form.cleaned_data[k] for k in ("deployment", "input_usd", "output_usd"))
    pricing.set_price(dep, paid_in, paid_out)
    said = "its capacity" if paid_in is None else "the price set"
    messages.success(request, f"{dep.name} now charges {said}.")
    return redirect("observability:costs")


def _day(text: str, today: date) -> date:
    """``text`` as a day no later than ``today``; today when empty, not a date or before FIRST_DAY."""
    try:
        asked = date.fromisoformat(text.strip()[:10])
    except ValueError:
        return today
    return min(asked, today) if asked >= FIRST_DAY else today
