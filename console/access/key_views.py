"""API key pages: the list (every key for admins and viewers, their own for members) with what each did
today and this month, a form for a new one, one key's page (its limits, rotation, revoke).

A new secret (a new key, or a rotation) is shown once: the POST keeps it sealed in Redis for a moment
(console.access.shown_once) and redirects to the page that takes it; that page is never cached, and a
reload finds nothing, so it never makes a second key either.
"""

from collections.abc import Mapping

from django.contrib import messages
from django.db import transaction
from django.db.models import F
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_POST

from console.access import keys, page_parts, shown_once
from console.access.forms import ApiKeyForm, KeyChangeForm, RotateForm
from console.access.key_activity import NO_PRICE, spent_by, with_activity
from console.access.models import ApiKey, Priority, Role
from console.access.roles import may_manage_key, role_of
from console.errors import ConsoleError


def _shown(request: HttpRequest) -> str:
    return shown_once.take(request.GET.get("shown", "")) or ""


def _page(request: HttpRequest, template: str, context: Mapping[str, object]) -> HttpResponse:
    shown = {
        "new_key": _shown(request),
        "no_price": NO_PRICE,
        "now": timezone.now(),
        "ceilings": (ceilings := keys.ceilings_for(request.user)),
        "spent": spent_by(request.user)
        if ceilings and (ceilings.daily_budget_usd or ceilings.monthly_budget_usd)
        else None,
    }
    resp = render(request, template, {**context, **shown})
    add_never_cache_headers(resp)  # the new key must not stay in any cache
    return resp


def keys_page(request: HttpRequest) -> HttpResponse:
    interactive = keys.may_choose_interactive(request.user, request.user)
    owners = keys.possible_owners() if role_of(request.user) == Role.ADMIN else None
    form = ApiKeyForm(
        request.POST or None, interactive=interactive, ceilings=keys.ceilings_for(request.user), owners=owners
    )
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():  # a secret Redis cannot keep leaves no key behind
                _, secret = keys.create_key(
                    form.cleaned_data["name"], request.user, owner=form.owner(), **form.limits()
                )
                token = shown_once.keep(secret)
        except ConsoleError as exc:
            form.add_console_error(exc)
        else:
            return redirect(f"{reverse('access:keys')}?shown={token}")  # the page top: the key shown once
    live_first = F("revoked_at").desc(nulls_first=True)
    rows = with_activity(keys.visible_keys(request.user)).order_by(live_first, "-created_at")
    holder = role_of(request.user) != Role.VIEWER
    return _page(request, "access/keys.html", {"form": form if holder else None, "keys": rows})


def key_page(request: HttpRequest, pk: int) -> HttpResponse:
    """One key: its limits (changed here, within its owner's ceilings), its rotation (while it is live: the
    rotation of an expired key is refused) and revoke."""
    key = keys.visible_keys(request.user).filter(pk=pk).first() or keys.manageable_key(request.user, pk)
    may_manage = may_manage_key(request.user, key)
    interactive = key.priority == Priority.INTERACTIVE or keys.may_choose_interactive(request.user, key.owner)
    whose = "your" if key.owner_id == request.user.pk else "its owner's"
    ceilings = keys.ceilings_for(key.owner)
    form = KeyChangeForm(
        request.POST or None, initial=_initial(key), interactive=interactive, ceilings=ceilings, whose=whose
    )
    if request.method == "POST":
        key = keys.manageable_key(request.user, pk)
        if form.is_valid():
            try:
                keys.set_key_limits(key, request.user, **form.limits())
            except ConsoleError as exc:
                form.add_console_error(exc)
            else:
                messages.success(request, f"Limits of {key.name} saved.")
                return redirect("access:key", key.pk)
    row = with_activity(keys.visible_keys(request.user).filter(pk=key.pk)).first() or key
    context = {"key": row, "form": form if may_manage else None, "rotate": RotateForm() if may_manage else None}
    return _page(request, "access/key.html", {**context, "links": page_parts.links()})


def _initial(key: ApiKey) -> dict[str, object]:
    limits = keys.limits_of(key)
    return limits | {"allowed_models": ", ".join(key.allowed_models), "priority": key.priority}


@require_POST
def key_rotate(request: HttpRequest, pk: int) -> HttpResponse:
    key = keys.manageable_key(request.user, pk)
    form = RotateForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Pick how long the old secret keeps working.")
        return redirect("access:key", key.pk)
    try:
        with transaction.atomic():
            secret = keys.rotate_key(key, request.user, form.cleaned_data["grace_seconds"])
            token = shown_once.keep(secret)
    except ConsoleError as exc:
        messages.error(request, str(exc))
        return redirect("access:key", key.pk)
    return redirect(f"{reverse('access:key', args=[key.pk])}?shown={token}")


@require_POST
def key_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    key = keys.manageable_key(request.user, pk)
    keys.revoke_key(key, request.user)
    messages.success(request, f"Revoked {key.name} ({key.prefix}…).")
    return redirect("access:keys")
