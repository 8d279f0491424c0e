"""The Alerts page: what fires now and what resolved lately, each rule with its default (admins tune them), where
alerts go (the webhook shown as scheme and host only; admins set them and send a test) and the deliveries that
failed."""

from collections.abc import Mapping

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from console.access.models import ApiKey
from console.access.roles import is_admin
from console.alerts.delivery import audited, send_test, shown_url, smtp_server
from console.alerts.forms import DestinationForm, RuleForm
from console.alerts.models import Alert, AlertRule, Delivery, Destination
from console.alerts.rules import KINDS, rules
from console.alerts.visible import RECENT, theirs, visible
from console.audit.recording import form_changes, record
from console.deployments.models import Deployment, Replica

COLUMNS = {"threshold": "Threshold", "for_minutes": "Holds for (min)", "repeat_minutes": "Repeats every (min)"}


@login_required
def alerts_page(request: HttpRequest) -> HttpResponse:
    return _page(request)


def _page(
    request: HttpRequest,
    typed_rule: tuple[str, dict[str, object]] | None = None,
    email_to: str | None = None,
    refused: Mapping[str, list[str]] | None = None,
) -> HttpResponse:
    """The page; after a refused save, with what was typed kept in its fields (``typed_rule``: the rule's kind and
    its fields as sent; ``email_to`` as sent; a webhook URL is a secret, never written back into the page) and
    ``refused``, the destination form's errors by field, under each."""
    found = rules()
    destination = Destination.current()
    context = {
        "interval": settings.HEARTH_ALERT_INTERVAL,
        "open": _titled(
            visible(request.user, Alert.objects.filter(resolved_at=None, fired_at__isnull=False)).order_by("-fired_at"),
            is_admin(request.user),
        ),
        "resolved": _titled(
            visible(request.user, Alert.objects.exclude(resolved_at=None)).order_by("-resolved_at")[:RECENT],
            is_admin(request.user),
        ),
        "rules": [(KINDS[k], rule, _values(rule, typed_rule)) for k, rule in found.items()],
        "webhook_shown": shown_url(destination.webhook_url),
        "email_to": destination.email_to,
        "email_typed": destination.email_to if email_to is None else email_to,
        "refused": refused or {},
        "smtp_server": smtp_server(),
        "console_url": settings.HEARTH_HOSTNAME,
        "failures": [
            (_title(d.alert.rule.kind), d)
            for d in Delivery.objects.exclude(last_error="")
            .filter(theirs(request.user, "alert__"))
            .select_related("alert__rule")
            .order_by("-created_at")[:RECENT]
        ],
    }
    return render(request, "alerts/alerts.html", context)


def _values(rule: AlertRule, typed: tuple[str, dict[str, object]] | None) -> dict[str, object]:
    """The rule's fields as its form shows them: as stored, or as typed for the rule whose save was refused."""
    if typed is not None and typed[0] == rule.kind:
        return typed[1]
    shown: dict[str, object] = {name: f"{getattr(rule, name):g}" for name in COLUMNS}
    return shown | {"enabled": rule.enabled}


def _title(kind: str) -> str:
    """A kind's title, as the rules table names it (the kind's key for one no longer known)."""
    return KINDS[kind].title if kind in KINDS else kind


def _titled(alerts: QuerySet[Alert], admin: bool) -> list[tuple[str, Alert, str]]:
    """(title, alert, link) of each alert: ``_link``'s page of its subject ('' for none)."""
    return [(_title(a.rule.kind), a, _link(a.subject, admin)) for a in alerts.select_related("rule")]


def _link(subject: str, admin: bool) -> str:
    """The console page of what an alert is about, named in its subject (console.alerts.conditions): a deployment, a
    replica's deployment, a key (``key <id> …``, for an admin, who may open any key's page); '' for another subject, or
    one gone."""
    what, _, name = subject.partition(" ")
    if what == "deployment" and (dep := Deployment.objects.filter(name=name).first()) is not None:
        return reverse("deployments:detail", args=[dep.pk])
    if what == "replica" and (replica := Replica.objects.filter(runtime_name=name).first()) is not None:
        return reverse("deployments:detail", args=[replica.deployment_id])
    key_id = name.partition(" ")[0]
    if what == "key" and admin and key_id.isdigit() and ApiKey.objects.filter(pk=int(key_id)).exists():
        return reverse("access:key", args=[int(key_id)])
    return ""


@login_required
@require_POST
def tune_rule(request: HttpRequest, kind: str) -> HttpResponse:
    if kind not in KINDS:
        raise Http404("No such kind of alert.")
    rule = rules()[kind]
    form = RuleForm(request.POST, instance=rule, prefix=kind)
    if form.is_valid():
        with transaction.atomic():
            if changes := form_changes(form):  # a save that changed nothing is no entry (a trial's audit noise)
                record(None, "alerts.rule", form.save(), changes)
        messages.success(
            request, f"Rule “{KINDS[kind].title}” saved." if changes else f"“{KINDS[kind].title}”: no change."
        )
        return redirect("alerts:page")
    messages.error(
        request,
        f"Rule “{KINDS[kind].title}” not saved: "
        + " ".join(
            f"{COLUMNS.get(name, name)}: {' '.join(str(e) for e in errs)}" for name, errs in form.errors.items()
        ),
    )
    typed: dict[str, object] = {name: request.POST.get(f"{kind}-{name}", "") for name in COLUMNS}
    return _page(request, typed_rule=(kind, typed | {"enabled": bool(request.POST.get(f"{kind}-enabled"))}))


@login_required
@require_POST
def set_destination(request: HttpRequest) -> HttpResponse:
    destination = Destination.current()
    keep_webhook = not request.POST.get("webhook_url") and not request.POST.get("clear_webhook")
    data = request.POST.copy()
    if keep_webhook:
        data["webhook_url"] = destination.webhook_url
    form = DestinationForm(data, instance=destination)
    if form.is_valid():
        changes = audited(form_changes(form))
        with transaction.atomic():
            if changes:
                record(None, "alerts.destination", form.save(), changes)
        messages.success(request, "Alert destinations saved." if changes else "Alert destinations: no change.")
        return redirect("alerts:page")
    refused = {field: [str(e) for e in errors] for field, errors in form.errors.items()}
    messages.error(request, "Not saved: " + " ".join(" ".join(errors) for errors in refused.values()))
    return _page(request, email_to=request.POST.get("email_to", ""), refused=refused)


@login_required
@require_POST
def send_test_alert(request: HttpRequest) -> HttpResponse:
    """Send a test to each destination set up, now, and say on the page what each did with it."""
    destination = Destination.current()
    if not destination.webhook_url and not destination.email_to:
        messages.error(request, "Nothing to test: set a webhook URL or an email address first.")
        return redirect("alerts:page")
    results = send_test(destination)
    shown = {"webhook": shown_url(destination.webhook_url), "email": destination.email_to}
    record(None, "alerts.test", destination, {channel: why or "sent" for channel, why in results})
    for channel, why in results:
        if why and channel == "email":
            messages.error(
                request,
                f"The test by email ({shown[channel]}) failed at the SMTP server {smtp_server()} (EMAIL_HOST and "
                f"EMAIL_PORT in .env; docs/alerts.md): {why}",
            )
        elif why:
            messages.error(request, f"The test by webhook ({shown[channel]}) failed: {why}")
        elif channel == "webhook":
            messages.success(request, f"Test sent by webhook ({shown[channel]}): it was accepted.")
        else:
            messages.success(request, f"Test sent by email ({shown[channel]}): the SMTP server accepted it.")
    return redirect("alerts:page")
