"""Console pages: short function views; pages and their htmx refreshes share template partials."""

import shlex

from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from console import apikeys, changes, services
from console.forms import ApiKeyForm, ChangeForm, DeploymentForm, HfModelForm, LocalModelForm, SetupForm
from console.models import ApiKey, Deployment, ModelSource
from console.panel import live_panel
from console.services import ConsoleError


def setup(request: HttpRequest) -> HttpResponse:
    """First run: create the admin. Gone once any user exists."""
    user_model = get_user_model()
    if user_model.objects.exists():
        return redirect("console:login")
    form = SetupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = user_model.objects.create_superuser(form.cleaned_data["username"], "", form.cleaned_data["password"])
        login(request, user)
        return redirect("console:models")
    return render(request, "console/setup.html", {"form": form})


def login_page(request: HttpRequest) -> HttpResponseBase:
    """Django's login, or the first-run setup while no user exists."""
    if not get_user_model().objects.exists():
        return redirect("console:setup")
    return LoginView.as_view(template_name="console/login.html")(request)


@login_required
def models_page(request: HttpRequest) -> HttpResponse:
    is_local = "local-path" in request.POST
    local = LocalModelForm(request.POST if is_local else None, prefix="local")
    hf = HfModelForm(request.POST if "hf-repo_id" in request.POST else None, prefix="hf")
    if request.method == "POST":
        form = local if is_local else hf
        try:
            if form.is_valid():
                data = form.cleaned_data
                model = (
                    services.add_local_model(data["name"], data["path"])
                    if form is local
                    else services.add_hf_model(data["name"], data["repo_id"], data["revision"])
                )
                messages.success(request, f"Added {model.name}.")
                return redirect("console:models")
        except ConsoleError as exc:
            form.add_error(None, str(exc))
    models = ModelSource.objects.order_by("name")
    return render(request, "console/models.html", {"models": models, "local": local, "hf": hf})


@login_required
def deployments_page(request: HttpRequest) -> HttpResponse:
    form = DeploymentForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            dep = services.create_deployment(**form.cleaned_data)
        except ConsoleError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("console:deployment", dep.pk)
    deployments = Deployment.objects.select_related("model").order_by("name")
    return render(request, "console/deployments.html", {"form": form, "deployments": deployments})


@login_required
@require_POST
def plan_preview(request: HttpRequest) -> HttpResponse:
    """The plan for the deployment form's current values, before anything is created (htmx)."""
    form = DeploymentForm(request.POST)
    plan, error = None, ""
    if form.is_valid():
        data = form.cleaned_data
        try:
            plan = services.plan_for(data["model"], data["engine"], **form.plan_options())
        except ConsoleError as exc:
            error = str(exc)
    elif "model" in form.errors or "engine" in form.errors:
        error = "Pick a model and an engine to see the plan."
    else:
        problems = [(form.fields[f].label or f, " ".join(str(m) for m in e)) for f, e in form.errors.items()]
        error = " ".join(f"{label}: {text}" for label, text in problems if label != "name")
    context = {"plan": plan, "error": error}
    return render(request, "console/deployments.html#plan", context)


@login_required
def deployment_page(request: HttpRequest, pk: int) -> HttpResponse:
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    return render(request, "console/deployment.html", _deployment_context(dep))


@login_required
def deployment_panel(request: HttpRequest, pk: int) -> HttpResponse:
    """The live panel alone, polled every 2 s by htmx."""
    dep = get_object_or_404(Deployment, pk=pk)
    return render(request, "console/deployment.html#panel", _deployment_context(dep))


def _deployment_context(dep: Deployment) -> dict[str, object]:
    latest = list(dep.replicas.order_by("-id")[: dep.replica_count])  # the latest launch's replicas
    return {"dep": dep, "replicas": latest[::-1], "panel": live_panel(dep), "remedy": changes.remedy_for(dep)}


@login_required
@require_POST
def deployment_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    dep = get_object_or_404(Deployment, pk=pk)
    actions = {"launch": services.launch, "stop": services.stop, "remedy": changes.apply_remedy}
    try:
        actions[action](dep)
    except ConsoleError as exc:
        messages.error(request, str(exc))
    return redirect("console:deployment", dep.pk)


@login_required
def deployment_change(request: HttpRequest, pk: int) -> HttpResponse:
    """Change a deployment's settings: preview the new plan (and, while it runs, the Recreate and its
    expected downtime), then confirm."""
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    current = changes.current_settings(dep)
    form = ChangeForm(request.POST or None, initial=current | {"extra_args": shlex.join(current["extra_args"])})
    preview = None
    if request.method == "POST" and form.is_valid():
        try:
            if "confirm" in request.POST:
                changes.apply_change(dep, **form.settings())
                return redirect("console:deployment", dep.pk)
            preview = changes.preview_change(dep, **form.settings())
        except ConsoleError as exc:
            form.add_error(None, str(exc))
    return render(request, "console/change.html", {"dep": dep, "form": form, "preview": preview})


@login_required
def keys_page(request: HttpRequest) -> HttpResponse:
    """Keys and a form for a new one. A new key is shown once, on the page the create redirects to
    (kept in the session only until that page is rendered), so a reload never creates a second key."""
    form = ApiKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            _, key = apikeys.create_key(form.cleaned_data["name"], request.user, **form.limits())
        except ConsoleError as exc:
            form.add_error(None, str(exc))
        else:
            request.session["new_key"] = key
            return redirect("console:keys")
    keys = ApiKey.objects.order_by("-created_at")
    new_key = request.session.pop("new_key", "")
    return render(request, "console/keys.html", {"form": form, "keys": keys, "new_key": new_key})


@login_required
@require_POST
def key_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    key = get_object_or_404(ApiKey, pk=pk)
    apikeys.revoke_key(key)
    messages.success(request, f"Revoked {key.name} ({key.prefix}…).")
    return redirect("console:keys")


@login_required
@require_POST
def deployment_delete(request: HttpRequest, pk: int) -> HttpResponse:
    dep = get_object_or_404(Deployment, pk=pk)
    try:
        services.delete_deployment(dep)
    except ConsoleError as exc:
        messages.error(request, str(exc))
        return redirect("console:deployment", dep.pk)
    messages.success(request, f"Deleted {dep.name}.")
    return redirect("console:deployments")


@login_required
@require_POST
def model_delete(request: HttpRequest, pk: int) -> HttpResponse:
    model = get_object_or_404(ModelSource, pk=pk)
    try:
        services.delete_model(model)
    except ConsoleError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Deleted {model.name} (its files stay where they are).")
    return redirect("console:models")


@login_required
def doctor_page(request: HttpRequest) -> HttpResponse:
    """Pre-flight: the page shell; its table comes from doctor_checks once the worker has answered."""
    return render(request, "console/doctor.html")


@login_required
def doctor_checks(request: HttpRequest) -> HttpResponse:
    """The pre-flight table as the worker sees it (htmx; waits up to HEARTH_DOCTOR_WAIT seconds)."""
    from console.preflight import NoAnswer, worker_report

    try:
        context: dict[str, object] = {"report": worker_report()}
    except NoAnswer as exc:
        context = {"error": str(exc)}
    return render(request, "console/doctor.html#checks", context)
