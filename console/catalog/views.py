"""Model pages: the list, the forms to add a local folder or a Hugging Face repo, the demo catalog (one click
adds an entry and opens the deployment form with its plan on this box), and delete."""

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from console.catalog import sources
from console.catalog.demo import demo_models
from console.catalog.forms import HfModelForm, LocalModelForm
from console.catalog.models import ModelSource
from console.errors import ConsoleError
from engines.launch import EngineKind


@login_required
def models_page(request: HttpRequest) -> HttpResponse:
    """The models, and the forms that add one. A POST of a form (``local-*`` or ``hf-*`` fields) adds its model, or
    shows the form again with every mistake under its field and the values typed kept; nothing is saved then."""
    is_local = "local-path" in request.POST
    local = LocalModelForm(request.POST if is_local else None, prefix="local")
    hf = HfModelForm(request.POST if "hf-repo_id" in request.POST and not is_local else None, prefix="hf")
    form = local if is_local else hf
    if form.is_valid():  # an unbound form (a GET) is not
        try:
            model = sources.add_source(form.cleaned_data["name"], form.cleaned_data["source"])
        except ConsoleError as exc:  # another model took the name since the form was checked
            form.add_error("name", str(exc))
        else:
            messages.success(request, f"Added {model.name}.")
            return redirect("catalog:models")
    models = ModelSource.objects.order_by("name")
    context = {
        "models": models,
        "local": local,
        "hf": hf,
        "demo_models": demo_models(),
        "found": sources.found_folders(),
        "models_dir": settings.HEARTH_CACHE_DIR / "models",
        "demo_mode": settings.HEARTH_GPU_INVENTORY.startswith("sim:"),
    }
    return render(request, "catalog/models.html", context)


@login_required
@require_POST
def demo_plan(request: HttpRequest, name: str) -> HttpResponse:
    """Add the demo catalog's entry ``name`` (once) and open the deployment form on it, on the Simulator at
    the model's own context (max_model_len 0), so its plan on this box shows at once."""
    try:
        model, _ = sources.add_demo_model(name)
    except ConsoleError as exc:
        messages.error(request, str(exc))
        return redirect("catalog:models")
    query = urlencode({"model": model.pk, "engine": EngineKind.SIMULATOR.value, "name": model.name, "max_model_len": 0})
    return redirect(f"{reverse('deployments:list')}?{query}")


@login_required
@require_POST
def model_delete(request: HttpRequest, pk: int) -> HttpResponse:
    model = get_object_or_404(ModelSource, pk=pk)
    try:
        sources.delete_model(model)
    except ConsoleError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Deleted {model.name} (its files stay where they are).")
    return redirect("catalog:models")
