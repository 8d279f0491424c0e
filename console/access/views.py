"""Access pages: the first-run setup of the admin, sign-in (a password, throttled by django-axes, or the
company's OpenID provider) and the password change. Who may open which page: console.access.policy."""

from typing import cast

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login, update_session_auth_hash
from django.contrib.auth.models import User
from django.contrib.auth.views import LoginView
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render

from console.access import oidc
from console.access.forms import LoginForm, PasswordForm, SetupForm
from console.access.models import Member, Role
from console.audit.recording import record


def setup(request: HttpRequest) -> HttpResponse:
    """First run: create the admin. Gone once any user exists."""
    user_model = get_user_model()
    if user_model.objects.exists():
        return redirect("access:login")
    form = SetupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            user = user_model.objects.create_superuser(form.cleaned_data["username"], "", form.cleaned_data["password"])
            Member.objects.create(user=user, role=Role.ADMIN)
            record(user, "member.create", user, {"role": Role.ADMIN, "why": "first run"})
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect("catalog:models")
    return render(request, "access/setup.html", {"form": form})


def login_page(request: HttpRequest) -> HttpResponseBase:
    """Django's login (django-axes locks a username out from an address after HEARTH_LOGIN_FAILURE_LIMIT
    failures), with the single sign-on button when OIDC is set up; the first-run setup while no user exists."""
    if not get_user_model().objects.exists():
        return redirect("access:setup")
    context = {
        "oidc_label": settings.HEARTH_OIDC_LABEL if oidc.enabled() else "",
        "failure_limit": settings.AXES_FAILURE_LIMIT,
    }
    view = LoginView.as_view(template_name="access/login.html", authentication_form=LoginForm, extra_context=context)
    return view(request)


def password_page(request: HttpRequest) -> HttpResponse:
    """Change one's own password (the old one first). Accounts from the identity provider have none here."""
    user = cast(User, request.user)  # signed in: console.access.policy lets nobody else here
    if not user.has_usable_password():
        return render(request, "access/password.html", {"sso": True})
    form = PasswordForm(user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            form.save()
            record(user, "member.password", user, {})
        update_session_auth_hash(request, form.user)  # stay signed in here; other sessions end
        messages.success(request, "Password changed.")
        return redirect("access:password")
    return render(request, "access/password.html", {"form": form})
