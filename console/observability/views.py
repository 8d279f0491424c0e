"""Observability's pages: the dashboard (the console's home), a deployment's live panel (the fragment its page
polls every 2 s, htmx) and its chart series (JSON, polled by static/hearth-charts.js), the request log and its
CSV export, costs and prices, the metric mappings, and a deployment's SLO."""

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from appliance import celery_heartbeats
from console.access.roles import may_see_all
from console.audit.recording import form_changes, record
from console.deployments.models import Deployment, DeploymentState
from console.errors import form_refusal
from console.observability import charts, cost, gpu_strip
from console.observability.forms import MappingForm, RequestFilter, SloForm
from console.observability.models import MetricMapping, RequestLog, ScrapeHealth, ServiceLevel
from console.observability.outcomes import outcome_of
from console.observability.panel import LATENCY_WINDOW, STALE_AFTER_SCRAPES, live_panel, panels
from console.observability.queue_depth import queue_depth
from console.observability.request_log import cost_text, csv_lines, with_request_id
from console.observability.request_stats_sql import OUTCOME_WHERE

COSTS_EVERY = 60  # seconds a deployment's idle hours and per-key costs are cached for


def scraper_silence(deps: list[Deployment]) -> tuple[float | None, bool]:
    """Seconds since the scraper last tried any running replica (None: never), and whether that is a silence: over
    STALE_AFTER_SCRAPES intervals while one of ``deps`` has been ready longer than that (the scraper reads ready
    engines only: a launch, or one asleep, is no alarm; a trial saw the banner through every launch)."""
    last = ScrapeHealth.objects.filter(replica__running=True).order_by("-last_attempt_at").first()
    now, window = time.time(), STALE_AFTER_SCRAPES * settings.HEARTH_SCRAPE_INTERVAL
    scraper_age = now - last.last_attempt_at.timestamp() if last and last.last_attempt_at else None
    due = any(d.state == DeploymentState.READY and now - d.state_since.timestamp() > window for d in deps)
    return scraper_age, due and (scraper_age is None or scraper_age > window)


def _dashboard_context() -> dict[str, object]:
    deps = list(Deployment.objects.select_related("model").order_by("name"))
    shared, gpu_age, gpu_warning = gpu_strip.strip()
    scraper_age, silent = scraper_silence(deps)
    held = gpu_strip.holders()
    telemetry = shared.telemetry if shared else []
    shown = panels(deps)
    depth = queue_depth([p.dep.pk for p in shown if p.ready])
    for p in shown:
        p.held_by_class = depth.get(p.dep.pk)
        if silent:
            p.scraper_silent()
    return {
        "panels": shown,
        "gpus": shared,
        "gpu_rows": [(g, held.get(g.index, [])) for g in telemetry],
        "gpu_age": gpu_age,
        "gpu_warning": gpu_warning,
        "scraper_age": scraper_age,
        "scraper_silent": silent,
        "scraper_silence_cause": silence_cause(celery_heartbeats.read()) if silent else "",
        "latency_window": LATENCY_WINDOW // 60,
        "throughput_window": cost.THROUGHPUT_WINDOW,
    }


def silence_cause(found: celery_heartbeats.Liveness) -> str:
    """Why the scraper records nothing, as far as beat's and the workers' heartbeats tell, in one sentence."""
    if why := found.worker_stopped():
        return f"No worker is running ({why})."
    if why := found.beat_stopped():
        return f"{why}."
    if found.unreadable:
        return f"Whether the worker and beat run cannot be told: {found.unreadable}."
    return "The worker and beat both run: its scrapes fail or wait behind other tasks (the worker's log says which)."


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """The console's home: every deployment's state and numbers, the GPU strip, the scraper's health."""
    return render(request, "observability/dashboard.html", _dashboard_context())


@login_required
def dashboard_live(request: HttpRequest) -> HttpResponse:
    """The dashboard's live part alone, polled every 2 s by htmx."""
    return render(request, "observability/dashboard.html#live", _dashboard_context())


@login_required
def deployment_panel(request: HttpRequest, pk: int) -> HttpResponse:
    """The live numbers of one deployment (observability/panel.html)."""
    dep = get_object_or_404(Deployment, pk=pk)
    panel = live_panel(dep)
    if scraper_silence([dep])[1]:
        panel.scraper_silent()
    now = datetime.now(UTC)
    # in whole 5-minute periods and per day: they change slowly, so they are computed once a minute
    idle_key = f"observability:gpu-time:{dep.pk}"
    time_by_state = cache.get_or_set(idle_key, lambda: cost.gpu_time(dep, now), COSTS_EVERY)
    keys = cache.get_or_set(
        f"observability:keys:{dep.pk}:{now.date()}", lambda: cost.key_costs(now.date(), only=dep), COSTS_EVERY
    )
    slo = ServiceLevel.objects.filter(deployment=dep).first()
    keys = cost.visible_to(keys or [], own_keys(request))
    context = {
        "dep": dep,
        "panel": panel,
        "gpu_time": time_by_state,
        "keys": keys,
        "slo": slo,
        "slo_form": SloForm(instance=slo),
        "latency_window": LATENCY_WINDOW // 60,
        "throughput_window": cost.THROUGHPUT_WINDOW,
    }
    hourly = panel.cost.usd_per_hour if panel.cost else None
    context["use_costs"] = cache.get_or_set(
        f"observability:use:{dep.pk}", lambda: cost.use_costs(dep, now, hourly), COSTS_EVERY
    )
    if panel.cost and panel.cost.usd_per_hour is not None and time_by_state is not None:
        context["idle_usd"] = panel.cost.usd_per_hour * type(panel.cost.usd_per_hour)(repr(time_by_state.idle))
    return render(request, "observability/panel.html", context)


@login_required
def deployment_series(request: HttpRequest, pk: int) -> JsonResponse:
    """A deployment's chart series over ``?range=15m|1h|24h|30d`` (after ``?since=`` Unix s when given)."""
    dep = get_object_or_404(Deployment, pk=pk)
    name = request.GET.get("range", "1h")
    if name not in charts.RANGES:
        raise Http404("Unknown range.")
    since = request.GET.get("since")
    try:
        after = float(since) if since else None
    except ValueError:
        raise Http404("since must be Unix seconds.") from None
    return JsonResponse(charts.series(dep, name, time.time(), after))


@login_required
@require_POST
def deployment_slo(request: HttpRequest, pk: int) -> HttpResponse:
    """Set a deployment's TTFT and ITL targets (goodput is measured against them)."""
    dep = get_object_or_404(Deployment, pk=pk)
    form = SloForm(request.POST, instance=ServiceLevel.objects.filter(deployment=dep).first())
    if form.is_valid():
        with transaction.atomic():
            slo = form.save(commit=False)
            slo.deployment = dep
            slo.save()
            record(None, "deployment.slo", dep, form_changes(form))
        messages.success(request, "SLO saved.")
    else:
        labels = {name: str(field.label) for name, field in form.fields.items()}  # "Enter a number." twice said neither
        messages.error(request, f"The SLO was not saved: {form_refusal(form, labels)}")
    return redirect("deployments:detail", dep.pk)


def _filtered(form: RequestFilter, user: Any) -> QuerySet[RequestLog]:
    """The request log rows the filters pick, of the keys ``user`` may see (a member: their own); none while a
    filter is not valid (``?hours=-5`` listed every row of the day under its error)."""
    rows = RequestLog.objects.select_related("api_key").order_by("-created_at")
    if not may_see_all(user):
        rows = rows.filter(api_key__owner=user)
    if form.is_bound and not form.is_valid():
        return rows.none()
    data = form.cleaned_data if form.is_bound else {}
    since = datetime.now(UTC) - timedelta(hours=data.get("hours") or 24)
    rows = rows.filter(created_at__gte=since)
    if data.get("model"):
        rows = rows.filter(model=data["model"])
    if key := data.get("key"):  # one key: "g" is the key named g, not every key with a g in its name
        rows = rows.filter(
            Q(api_key__name__iexact=key) | Q(api_key__prefix__startswith=key) | Q(key_prefix__startswith=key)
        )
    if data.get("status"):
        rows = rows.filter(status=data["status"])
    if data.get("request_id"):
        rows = with_request_id(rows, data["request_id"])
    if data.get("priority"):
        rows = rows.filter(priority=data["priority"])
    if data.get("batch"):
        rows = rows.filter(batch_id__startswith=data["batch"])  # the start of an id, as the Batches list shows it
    if data.get("outcome") in OUTCOME_WHERE:
        rows = rows.filter(OUTCOME_WHERE[data["outcome"]])
    return rows


@login_required
def request_log(request: HttpRequest) -> HttpResponse:
    """Recent requests as the gateway logged them, with filters; 50 a page."""
    form = RequestFilter(request.GET or None)
    page = Paginator(_filtered(form, request.user), 50).get_page(request.GET.get("page"))
    for row in page:
        row.outcome = outcome_of(  # type: ignore[attr-defined]
            row.status, row.finish_reason, row.truncated, row.client_cancelled, row.completion_tokens
        )
        row.cost_text = cost_text(row.cost_usd)  # type: ignore[attr-defined]
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "observability/requests.html", {"form": form, "page": page, "query": query.urlencode()})


@login_required
def request_log_csv(request: HttpRequest) -> HttpResponseBase:
    """Every row the request log's filters pick (the page's query), newest first, as
    ``requests-YYYYMMDD-HHMM.csv`` (console.observability.request_log.CSV_COLUMNS); 400, in plain text saying which
    filter and why, for a filter that is not valid (a script gets that, not an empty table)."""
    form = RequestFilter(request.GET or None)
    if form.is_bound and not form.is_valid():
        return HttpResponse(form.problems(), status=400, content_type="text/plain; charset=utf-8")
    rows = _filtered(form, request.user).iterator(chunk_size=2000)
    response = StreamingHttpResponse(csv_lines(rows), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="requests-{datetime.now(UTC):%Y%m%d-%H%M}.csv"'
    return response


@login_required
def mappings(request: HttpRequest) -> HttpResponse:
    """The metric mappings in force, by flavor; an admin adds or edits one (``?edit=id``)."""
    editing = MetricMapping.objects.filter(pk=request.GET.get("edit") or 0).first()
    form = MappingForm(instance=editing)
    if request.method == "POST":
        editing = MetricMapping.objects.filter(pk=request.POST.get("id") or 0).first()
        form = MappingForm(request.POST, instance=editing)
        if form.is_valid():
            with transaction.atomic():
                row = form.save()
                record(None, "mapping.set", row, form_changes(form))
            messages.success(request, f"Mapping saved: {row}.")
            return redirect("observability:mappings")
    rows = MetricMapping.objects.order_by("flavor", "canonical")
    return render(request, "observability/mappings.html", {"rows": rows, "form": form, "editing": editing})


def own_keys(request: HttpRequest) -> set[int] | None:
    """The ids of the keys a member holds, whose usage alone they see by name; None for those who see all."""
    if may_see_all(request.user):
        return None
    return set(request.user.api_keys.values_list("pk", flat=True))  # type: ignore[union-attr]
