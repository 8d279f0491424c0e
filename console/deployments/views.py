"""Deployment pages: the list and the form with its live plan, one deployment's page (its state, log and
plan; the live numbers come from console.observability), its actions, and the change of its settings; engines
Hearth did not launch, registered, added to a deployment and removed."""

import shlex
from collections.abc import Callable
from dataclasses import replace

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from appliance import celery_heartbeats
from console.catalog.models import ModelSource
from console.deployments import (
    admin_actions,
    changes,
    cluster_export,
    external,
    idle_actions,
    page_parts,
    remedy_actions,
    scaling,
    state_caveats,
)
from console.deployments.agent_settings import agent_settings
from console.deployments.engine_flags import check_extra_args
from console.deployments.forms import ChangeForm, DeploymentForm, EndpointForm, ExternalForm
from console.deployments.idle_settings import idle_settings, merged, policy_words, set_idle_settings
from console.deployments.models import Deployment, DeploymentState
from console.deployments.planning import demo_refusal
from console.deployments.room_making import new_plan
from console.deployments.serving_limits import (
    judged,
    limits_words,
    only_limits_differ,
    plan_with,
    serving_limits,
    set_serving_limits,
)
from console.errors import ConsoleError
from console.weights import progress as weights_progress
from engines.launch import CPU_ENGINES, EngineKind
from engines.sleep_support import IdlePolicy


@login_required
def deployments_page(request: HttpRequest) -> HttpResponse:
    """The list and the form; ``?model=&engine=&name=&max_model_len=`` fill the form in (the demo catalog's
    one click)."""
    prefill = {k: v for k, v in request.GET.items() if k in ("model", "engine", "name", "max_model_len")}
    form = DeploymentForm(request.POST or None, initial=prefill)
    if request.method == "POST" and form.is_valid():
        try:
            dep = admin_actions.create_deployment(**form.cleaned_data)
        except ConsoleError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("deployments:detail", dep.pk)
    deployments = Deployment.objects.select_related("model").order_by("name")
    return render(request, "deployments/deployments.html", {"form": form, "deployments": deployments})


@login_required
@require_POST
def plan_preview(request: HttpRequest) -> HttpResponse:
    """The plan for the deployment form's current values, before anything is created (htmx)."""
    form = DeploymentForm(request.POST)
    plan, error, note, room, hint = None, "", "", "", ""
    if form.is_valid():
        data = form.cleaned_data
        try:  # the flags Create would refuse, refused here first (a trial's preview said "Fits." to them)
            check_extra_args(data["extra_args"], data["engine"])
            planned = new_plan(data["name"], data["model"], data["engine"], form.plan_options(), data["make_room"])
        except ConsoleError as exc:
            error = str(exc)
        else:
            plan, room = planned.plan, planned.refusal or (planned.room.words() if planned.room else "")
        if data["model"].kind == ModelSource.Kind.DEMO and data["engine"] != EngineKind.SIMULATOR:
            note = demo_refusal(data["model"])
    elif "model" in form.errors or "engine" in form.errors:
        hint = "Pick a model and an engine to see the plan."  # a form not filled in yet is not an error
    else:
        problems = [(form.fields[f].label or f, " ".join(str(m) for m in e)) for f, e in form.errors.items()]
        error = " ".join(f"{label}: {text}" for label, text in problems if label != "name")
    context = {"plan": plan, "error": error, "note": note, "room": room, "hint": hint}
    return render(request, "deployments/deployments.html#plan", context)


@login_required
def deployment_page(request: HttpRequest, pk: int) -> HttpResponse:
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    plan = dep.stored_plan
    # the Coding agents tab's settings, with the address this page was reached at; the context the plan gives (an
    # engine Hearth did not launch has none: the one set on the deployment, if any)
    base = f"{request.scheme}://{request.get_host()}"
    agents = agent_settings(base, dep.served_model_name, plan.max_model_len or dep.max_model_len)
    context = _deployment_context(dep) | {"plan": plan, "agent_settings": agents}
    return render(request, "deployments/deployment.html", context)


@login_required
def deployment_status(request: HttpRequest, pk: int) -> HttpResponse:
    """The state and its actions alone, polled every 2 s by htmx."""
    dep = get_object_or_404(Deployment, pk=pk)
    return render(request, "deployments/deployment.html#status", _deployment_context(dep))


@login_required
def deployment_logs(request: HttpRequest, pk: int) -> HttpResponse:
    """The replicas' engine logs alone, polled every 2 s by htmx."""
    dep = get_object_or_404(Deployment, pk=pk)
    return render(request, "deployments/deployment.html#logs", _deployment_context(dep))


def _deployment_context(dep: Deployment) -> dict[str, object]:
    live = list(dep.replicas.launched().filter(stopped_at__isnull=True).order_by("id"))
    latest = live or list(dep.replicas.launched().order_by("-id")[: dep.replica_count])[::-1]  # the last launch's
    endpoints = list(dep.replicas.external().order_by("id"))
    return {
        "dep": dep,
        "replicas": latest,
        "endpoints": endpoints,
        "remedy": remedy_actions.remedy_for(dep),
        "parts": page_parts.templates(),
        "policy": policy_words(dep),
        "limits": limits_words(dep),
        "can_sleep": dep.state == DeploymentState.READY and idle_actions.can_sleep_now(dep),
        "events": dep.recent_events(20),
        "caveats": state_caveats.caveats(dep, celery_heartbeats.read()),
        "download": weights_progress.read(dep.pk) if dep.state == DeploymentState.PULLING else None,
        "drain_seconds": settings.HEARTH_DRAIN_SECONDS,  # a Stop's drain (console.deployments.stopping), seconds
    }


@login_required
@require_POST
def deployment_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    dep = get_object_or_404(Deployment, pk=pk)
    make_room = request.POST.get("make_room") == "on"
    actions: dict[str, Callable[[Deployment], object]] = {
        "launch": lambda d: admin_actions.launch(d, make_room=make_room),
        "stop": admin_actions.stop,
        "remedy": remedy_actions.apply_remedy,
        "sleep": idle_actions.sleep_by_hand,
        "wake": lambda d: idle_actions.wake_by_hand(d, make_room=make_room),
    }
    try:
        actions[action](dep)
    except ConsoleError as exc:
        messages.error(request, str(exc))
    return redirect("deployments:detail", dep.pk)


@login_required
def deployment_change(request: HttpRequest, pk: int) -> HttpResponse:
    """Change a deployment's settings: preview the new plan (and, while it runs, the Recreate and its
    expected downtime, or for its replica count alone the replicas added or drained, without downtime), then
    confirm. Idle settings and serving limits alone act at once, without a Recreate."""
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    current = changes.current_settings(dep)
    initial = current | idle_settings(dep) | serving_limits(dep) | {"extra_args": shlex.join(current["extra_args"])}
    form = ChangeForm(request.POST or None, initial=initial, engine=dep.engine)
    preview, same = None, False
    if request.method == "POST" and form.is_valid():
        settings, limits = form.settings(), form.limits()
        try:
            idle, same = merged(dep, form.idle()), only_limits_differ(settings, current)
            if same:  # the idle settings and serving limits alone: no new plan, nothing recreated
                preview = changes.ChangePreview(plan_with(dep, **limits), recreate=False, downtime_seconds=None)
            else:
                preview = changes.preview_change(dep, **settings)
                preview = replace(preview, plan=judged(dep, preview.plan, **limits))
            if not preview.plan.fits and settings["replica_count"] != dep.replica_count:
                form.add_error("replica_count", preview.plan.reasons[-1])
            elif "confirm" in request.POST:
                with transaction.atomic():  # all or nothing; a recreate is sent once all is stored
                    saved = set_idle_settings(dep, **idle) | set_serving_limits(dep, **limits)
                    if not same:
                        changes.apply_change(dep, **settings)
                if same and saved:
                    messages.success(request, f"Saved {dep.name}'s settings: they act at once, nothing relaunched.")
                elif same:
                    messages.info(request, f"Nothing changed: {dep.name}'s settings are as they were.")
                return redirect("deployments:detail", dep.pk)
        except ConsoleError as exc:
            form.add_error(None, str(exc))
            dep.refresh_from_db()  # what a refused change set on it was not stored
    gpus = changes.replicas_gpus(preview) if preview else []
    words = scaling.scale_words(*preview.scale) if preview and preview.scale else ""
    context = {"dep": dep, "form": form, "preview": preview, "gpus": gpus, "scale_words": words, "at_once": same}
    context["sleeps_after_relaunch"] = bool(preview) and _sleeps_after_relaunch(dep, form.cleaned_data["idle_policy"])
    context["on_cpu"] = dep.engine in CPU_ENGINES  # what its recreate frees: the host's memory, not GPUs
    return render(request, "deployments/change.html", context)


def _sleeps_after_relaunch(dep: Deployment, policy: str) -> bool:
    """Whether the idle ``policy`` asked is sleep while the engines serving now were started without sleep mode,
    which only a launch gives them (console.deployments.lifecycle.sleep_mode_on): until then idling stops them to
    save."""
    running = dep.state == DeploymentState.READY
    return policy == IdlePolicy.SLEEP and running and not idle_actions.can_sleep_now(dep)


@login_required
@require_POST
def deployment_delete(request: HttpRequest, pk: int) -> HttpResponse:
    dep = get_object_or_404(Deployment, pk=pk)
    try:
        admin_actions.delete_deployment(dep)
    except ConsoleError as exc:
        messages.error(request, str(exc))
        return redirect("deployments:detail", dep.pk)
    messages.success(request, f"Deleted {dep.name}.")
    return redirect("deployments:list")


@login_required
def deployment_export(request: HttpRequest, pk: int) -> HttpResponse:
    """Export for a cluster: each target's file to download, or why it is not offered."""
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    try:
        context: dict[str, object] = {"dep": dep, "exports": cluster_export.exports_of(dep)}
    except ConsoleError as exc:
        context = {"dep": dep, "error": str(exc)}
    return render(request, "deployments/export.html", context)


@login_required
def deployment_export_file(request: HttpRequest, pk: int, target: str) -> HttpResponse:
    """One target's file, saved as YAML; a target not offered goes back to the export page with why."""
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    try:
        found = cluster_export.export_of(dep, target)
    except ConsoleError as exc:
        messages.error(request, str(exc))
        return redirect("deployments:export", dep.pk)
    response = HttpResponse(found.text, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{found.filename}"'
    return response


@login_required
def external_register(request: HttpRequest) -> HttpResponse:
    """Register an engine Hearth did not launch as a deployment; what the endpoint answered wrong shows on the form,
    and nothing is saved."""
    form = ExternalForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            dep = external.register(**form.cleaned_data)
        except ConsoleError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("deployments:detail", dep.pk)
    return render(request, "deployments/external.html", {"form": form, "dep": None})


@login_required
def endpoint_add(request: HttpRequest, pk: int) -> HttpResponse:
    """Add an engine Hearth did not launch to a deployment as one more replica."""
    dep = get_object_or_404(Deployment, pk=pk)
    form = EndpointForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            external.add_endpoint(dep, **form.cleaned_data)
        except ConsoleError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("deployments:detail", dep.pk)
    return render(request, "deployments/external.html", {"form": form, "dep": dep})


@login_required
@require_POST
def endpoint_remove(request: HttpRequest, pk: int, replica_id: int) -> HttpResponse:
    dep = get_object_or_404(Deployment, pk=pk)
    try:
        external.remove_endpoint(dep, replica_id)
    except ConsoleError as exc:
        messages.error(request, str(exc))
    return redirect("deployments:detail", dep.pk)
