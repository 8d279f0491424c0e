"""The members pages (admins only, console.access.policy): everyone with their role and keys, a form to
add someone, and one member's role, state and limits, and a new password for one who forgot theirs."""

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count, F, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from console.access import members
from console.access.key_activity import spent_by, with_budget_refusal
from console.access.member_forms import MemberAddForm, MemberForm, MemberPasswordForm
from console.access.models import ApiKey, Member
from console.access.roles import role_of
from console.errors import ConsoleError


def members_page(request: HttpRequest) -> HttpResponse:
    form = MemberAddForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            user = members.add_member(request.user, data["username"], data["password"], data["role"])
        except ConsoleError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Added {user.get_username()} as {data['role']}.")
            return redirect("access:member", user.pk)
    users = get_user_model().objects.select_related("member").order_by("username")
    users = users.annotate(live_keys=Count("api_keys", filter=Q(api_keys__revoked_at__isnull=True)))
    rows = [(u, role_of(u)) for u in users]
    return render(request, "access/members.html", {"form": form, "rows": rows})


def member_page(request: HttpRequest, pk: int, password_form: MemberPasswordForm | None = None) -> HttpResponse:
    user = get_object_or_404(get_user_model().objects.select_related("member"), pk=pk)
    member = Member.objects.filter(user=user).first()
    initial: dict[str, object] = {"role": role_of(user), "is_active": user.is_active}
    if member is not None:
        initial |= {name: getattr(member, name) for name in members.MEMBER_LIMITS}
        initial["allowed_models"] = ", ".join(member.allowed_models)
    form = MemberForm((request.POST or None) if password_form is None else None, initial=initial)
    if request.method == "POST" and password_form is None and form.is_valid():
        try:
            with transaction.atomic():  # all of the form or none of it
                members.set_role(request.user, user, form.cleaned_data["role"])
                members.set_active(request.user, user, form.cleaned_data["is_active"])
                members.set_member_limits(request.user, user, **form.limits())
        except ConsoleError as exc:
            form.add_console_error(exc)
        else:
            messages.success(request, f"Saved {user.get_username()}.")
            live = ApiKey.objects.filter(owner=user, revoked_at__isnull=True).count()
            if (most := form.cleaned_data["max_keys"]) is not None and live > most:
                messages.warning(
                    request,
                    f"{user.get_username()} holds {live} live keys, over the new limit of {most}: they keep working; "
                    "no new one can be made until enough are revoked (below).",
                )
            return redirect("access:member", user.pk)
    keys = with_budget_refusal(ApiKey.objects.filter(owner=user).select_related("owner__member")).order_by(
        F("revoked_at").desc(nulls_first=True), "-created_at"
    )
    context = {
        "person": user,
        "person_role": role_of(user),
        "form": form,
        "keys": keys,
        "sso": member and member.oidc_subject,
        "member": member,
        "spent": spent_by(user),
        "password_form": password_form or MemberPasswordForm(),
    }
    return render(request, "access/member.html", context)


@require_POST
def member_password(request: HttpRequest, pk: int) -> HttpResponse:
    """An admin's new password for the member (members.set_password); the page again with the errors if refused."""
    user = get_object_or_404(get_user_model(), pk=pk)
    form = MemberPasswordForm(request.POST)
    if form.is_valid():
        try:
            members.set_password(request.user, user, form.cleaned_data["password"])
        except ConsoleError as exc:
            form.add_error("password", str(exc))
        else:
            messages.success(request, f"New password set for {user.get_username()}; their sessions ended.")
            return redirect("access:member", user.pk)
    return member_page(request, pk, password_form=form)
