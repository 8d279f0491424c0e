"""Model pages: the list, the forms to add a local folder or a Hugging Face repo, and delete."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from console.catalog import sources
from console.catalog.forms import HfModelForm, LocalModelForm
from console.catalog.models import ModelSource
from console.errors import ConsoleError


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
                    sources.add_local_model(data["name"], data["path"])
                    if form is local
                    else sources.add_hf_model(data["name"], data["repo_id"], data["revision"])
                )
                messages.success(request, f"Added {model.name}.")
                return redirect("catalog:models")
        except ConsoleError as exc:
            form.add_error(None, str(exc))
    models = ModelSource.objects.order_by("name")
    return render(request, "catalog/models.html", {"models": models, "local": local, "hf": hf})


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
