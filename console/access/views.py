"""Access pages: the first-run setup of the admin, sign-in, and API keys (create, shown once; revoke)."""

from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from console.access import keys
from console.access.forms import ApiKeyForm, SetupForm
from console.access.models import ApiKey
from console.errors import ConsoleError


def setup(request: HttpRequest) -> HttpResponse:
    """First run: create the admin. Gone once any user exists."""
    user_model = get_user_model()
    if user_model.objects.exists():
        return redirect("access:login")
    form = SetupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = user_model.objects.create_superuser(form.cleaned_data["username"], "", form.cleaned_data["password"])
        login(request, user)
        return redirect("catalog:models")
    return render(request, "access/setup.html", {"form": form})


def login_page(request: HttpRequest) -> HttpResponseBase:
    """Django's login, or the first-run setup while no user exists."""
    if not get_user_model().objects.exists():
        return redirect("access:setup")
    return LoginView.as_view(template_name="access/login.html")(request)


@login_required
def keys_page(request: HttpRequest) -> HttpResponse:
    """Keys and a form for a new one. A new key is shown once, on the page the create redirects to
    (kept in the session only until that page is rendered), so a reload never creates a second key."""
    form = ApiKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            _, key = keys.create_key(form.cleaned_data["name"], request.user, **form.limits())
        except ConsoleError as exc:
            form.add_error(None, str(exc))
        else:
            request.session["new_key"] = key
            return redirect("access:keys")
    rows = ApiKey.objects.order_by("-created_at")
    new_key = request.session.pop("new_key", "")
    return render(request, "access/keys.html", {"form": form, "keys": rows, "new_key": new_key})


@login_required
@require_POST
def key_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    key = get_object_or_404(ApiKey, pk=pk)
    keys.revoke_key(key)
    messages.success(request, f"Revoked {key.name} ({key.prefix}…).")
    return redirect("access:keys")
