"""Capacity pages: a deployment's checks (start one, its SLO, tuning), one run (its progress, cancel, results
and charts, exports), two runs compared, and a tuning. Run and tuning fragments are polled by htmx."""

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from console.capacity import exports, runs, tuning
from console.capacity.forms import CheckForm, SloForm, TuningForm
from console.capacity.models import CapacityRun, Tuning
from console.deployments.changes import current_settings, preview_change
from console.deployments.models import Deployment
from console.errors import ConsoleError
from console.observability.outcomes import Slo
from console.observability.service_level import check_slo


def _downtime(dep: Deployment) -> float | None:
    try:
        return preview_change(dep, **current_settings(dep)).downtime_seconds
    except ConsoleError:
        return None


@login_required
def capacity_page(request: HttpRequest, pk: int) -> HttpResponse:
    """Start a check (POST), and the deployment's runs, SLO and tunings."""
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    runs.fail_stale_runs(dep.pk)
    tuning.fail_stale_tunings(dep.pk)
    form = CheckForm(request.POST or None, prefix="check")
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            run = runs.start_check(
                dep,
                request.user,
                label=data["label"],
                confirm_live_traffic=data["confirm_live_traffic"],
                **form.check(),
            )
        except ConsoleError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("capacity:run", run.pk)
    return render(request, "capacity/capacity.html", _context(dep, form=form))


def _context(dep: Deployment, **forms: object) -> dict[str, object]:
    past = CapacityRun.objects.filter(deployment=dep).order_by("-pk")
    slo, own = check_slo(dep)
    return {
        "dep": dep,
        "runs": past,
        "tunings": Tuning.objects.filter(deployment=dep).order_by("-pk"),
        "live": runs.live_traffic(dep),
        "downtime": _downtime(dep),
        "form": forms.get("form") or CheckForm(prefix="check"),
        "tuning_form": forms.get("tuning_form") or TuningForm(prefix="tune"),
        "slo": slo,
        "slo_set": own,
        "slo_form": _slo_form(slo, own),
    }


def _slo_form(slo: Slo, own: bool) -> SloForm:
    """The deployment's SLO to edit; with none set, empty, the default shown as placeholders (saving it unchanged
    must not make the default look chosen)."""
    if own:
        return SloForm(initial={"ttft_seconds": slo.ttft_seconds, "itl_seconds": slo.itl_seconds})
    form = SloForm()
    for name in ("ttft_seconds", "itl_seconds"):
        field = form.fields[name]
        field.widget.attrs["placeholder"] = f"{getattr(slo, name)}"
        field.help_text = f"Empty: the default, {getattr(slo, name)} s."  # the placeholder alone was cut off
    return form


@login_required
@require_POST
def slo(request: HttpRequest, pk: int) -> HttpResponse:
    dep = get_object_or_404(Deployment, pk=pk)
    form = SloForm(request.POST)
    if form.is_valid():
        try:
            runs.set_slo(dep, form.cleaned_data["ttft_seconds"], form.cleaned_data["itl_seconds"])
            messages.success(request, "SLO saved; goodput is measured at it from the next check on.")
        except ConsoleError as exc:
            messages.error(request, str(exc))
    else:
        messages.error(request, "The SLO needs a TTFT and an ITL in seconds, above 0.")
    return redirect("capacity:deployment", dep.pk)


@login_required
@require_POST
def start_tuning(request: HttpRequest, pk: int) -> HttpResponse:
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    form = TuningForm(request.POST, prefix="tune")
    if form.is_valid():
        try:
            values = tuning.parse_values(form.cleaned_data["knob"], form.cleaned_data["values"])
            row = tuning.start_tuning(dep, request.user, form.cleaned_data["knob"], values, form.check())
        except ConsoleError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("capacity:tuning", row.pk)
    return render(request, "capacity/capacity.html", _context(dep, tuning_form=form))


@login_required
def run_page(request: HttpRequest, pk: int) -> HttpResponse:
    run = runs.current(get_object_or_404(CapacityRun, pk=pk))
    return render(request, "capacity/run.html", _run_context(run))


@login_required
def run_status(request: HttpRequest, pk: int) -> HttpResponse:
    """The progress and results alone, polled every second by htmx while the run is active."""
    run = runs.current(get_object_or_404(CapacityRun, pk=pk))
    return render(request, "capacity/run.html#status", _run_context(run))


def _run_context(run: CapacityRun) -> dict[str, object]:
    return {"run": run, "results": list(run.results.all()), "chart": [exports.run_dict(run)]}


@login_required
@require_POST
def run_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(CapacityRun, pk=pk)
    try:
        runs.cancel_check(run)
    except ConsoleError as exc:
        messages.error(request, str(exc))
    return redirect("capacity:run", run.pk)


@login_required
def run_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    """The run as a JSON or CSV download."""
    run = get_object_or_404(CapacityRun, pk=pk)
    if fmt == "csv":
        resp = HttpResponse(exports.run_csv(run), content_type="text/csv; charset=utf-8")
    else:
        resp = HttpResponse(json.dumps(exports.run_dict(run), indent=2), content_type="application/json")
    resp["Content-Disposition"] = f'attachment; filename="capacity-run-{run.pk}.{fmt}"'
    return resp


@login_required
def compare_page(request: HttpRequest) -> HttpResponse:
    """Two runs side by side: ``?a=ID&b=ID``."""
    try:
        a, b = (get_object_or_404(CapacityRun, pk=int(request.GET.get(k, ""))) for k in ("a", "b"))
    except ValueError:
        messages.error(request, "Pick two runs to compare.")
        return redirect("deployments:list")
    context = {
        "a": a,
        "b": b,
        "numbers": exports.by_number(rows := exports.compare(a, b)),
        "levels": sorted({r.level for r in rows}),
        "differences": exports.setting_differences(a, b),
        "chart": [exports.run_dict(a), exports.run_dict(b)],
    }
    return render(request, "capacity/compare.html", context)


@login_required
def tuning_page(request: HttpRequest, pk: int) -> HttpResponse:
    row = tuning.current(get_object_or_404(Tuning, pk=pk))
    return render(request, "capacity/tuning.html", _tuning_context(row))


@login_required
def tuning_status(request: HttpRequest, pk: int) -> HttpResponse:
    row = tuning.current(get_object_or_404(Tuning, pk=pk))
    return render(request, "capacity/tuning.html#status", _tuning_context(row))


def _tuning_context(row: Tuning) -> dict[str, object]:
    runs = list(row.runs.order_by("pk"))
    scored = [(run, tuning.peak_goodput(run)) for run in runs]
    return {"tuning": row, "scored": scored, "chart": [exports.run_dict(r) for r in runs]}


@login_required
@require_POST
def tuning_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    row = get_object_or_404(Tuning, pk=pk)
    try:
        {"cancel": tuning.cancel_tuning, "apply": tuning.apply_best}[action](row)
    except ConsoleError as exc:
        messages.error(request, str(exc))
    return redirect("capacity:tuning", row.pk)
