"""Alerts' part of the JSON API: what fires and what resolved lately (as the Alerts page lists them, to each person
what console.alerts.visible lets them see), the rules (admins tune them), where alerts go (the webhook shown as its
scheme and host only, never whole: its path is a secret) and a test sent there. Writes use the page's forms, so
their rules and messages, and its audit entries."""

from datetime import datetime

from django.db import transaction
from django.http import Http404, HttpRequest
from ninja import Router, Schema
from pydantic import StrictBool, StrictFloat

from console.alerts.delivery import audited, send_test, shown_url, smtp_server
from console.alerts.forms import DestinationForm, RuleForm
from console.alerts.models import Alert, AlertRule, Destination
from console.alerts.rules import KINDS, rules
from console.alerts.visible import RECENT, visible
from console.api_bodies import Body
from console.audit.recording import form_changes, record
from console.errors import ConsoleError, form_refusal

router = Router(tags=["alerts"])


class AlertOut(Schema):
    """One alert: its rule's kind and title, its subject as stored and as people read it (``about``: a budget
    alert's key by prefix and name), the condition in words, when it began to hold (``since``), fired, and resolved
    (None: open) with the words it resolved with."""

    id: int
    kind: str
    title: str
    subject: str
    about: str
    message: str
    since: datetime
    fired_at: datetime | None
    resolved_at: datetime | None
    resolved_message: str

    @staticmethod
    def resolve_kind(obj: Alert) -> str:
        return obj.rule.kind

    @staticmethod
    def resolve_title(obj: Alert) -> str:
        return KINDS[obj.rule.kind].title if obj.rule.kind in KINDS else obj.rule.kind


class AlertsOut(Schema):
    open: list[AlertOut]  # firing now, the latest fired first
    resolved: list[AlertOut]  # the RECENT (20) resolved last, the latest first


@router.get("/alerts", response=AlertsOut)
def list_alerts(request: HttpRequest) -> dict[str, list[Alert]]:
    """The Alerts page's open and recently resolved alerts: everyone's for admins and viewers; a member sees every
    alert but the budget alerts of other people's keys and of other members (console.alerts.visible)."""
    alerts = visible(request.user, Alert.objects.select_related("rule"))
    return {
        "open": list(alerts.filter(resolved_at=None, fired_at__isnull=False).order_by("-fired_at")),
        "resolved": list(alerts.exclude(resolved_at=None).order_by("-resolved_at")[:RECENT]),
    }


class RuleDefault(Schema):
    threshold: float
    for_minutes: float
    repeat_minutes: float


class RuleOut(Schema):
    """A kind's rule: on or off, its threshold in ``unit`` ("" none), which must lie from ``least`` to ``most``
    (None: no bound) and be whole where ``whole``, the minutes the condition holds before it fires (0: at once) and
    between repeats while it holds, and the kind's default of each."""

    kind: str
    title: str
    what: str
    unit: str
    enabled: bool
    threshold: float
    for_minutes: float
    repeat_minutes: float
    least: float
    most: float | None
    whole: bool
    default: RuleDefault


def _rule(rule: AlertRule) -> dict[str, object]:
    kind = KINDS[rule.kind]
    default = {"threshold": kind.threshold, "for_minutes": kind.for_minutes, "repeat_minutes": kind.repeat_minutes}
    fields = {name: getattr(rule, name) for name in ("kind", "enabled", "threshold", "for_minutes", "repeat_minutes")}
    about = {"title": kind.title, "what": kind.what, "unit": kind.unit, "least": kind.least, "most": kind.most}
    return fields | about | {"whole": kind.whole, "default": default}


@router.get("/alerts/rules", response=list[RuleOut])
def list_rules(request: HttpRequest) -> list[dict[str, object]]:
    """Every kind's rule, in the Alerts page's order (console.alerts.rules)."""
    return [_rule(rule) for rule in rules().values()]


class RulePatch(Body):
    """What to change (admins); a field left out keeps its value. Thresholds in the kind's unit and range (GET
    /api/alerts/rules: ``least``, ``most``, ``whole``); ``for_minutes`` 0 to 1,440 (a day), ``repeat_minutes`` 1 to
    10,080 (a week): RuleForm's rules and words."""

    enabled: StrictBool | None = None
    threshold: StrictFloat | None = None
    for_minutes: StrictFloat | None = None
    repeat_minutes: StrictFloat | None = None


@router.patch("/alerts/rules/{kind}", response=RuleOut)
def tune_rule(request: HttpRequest, kind: str, data: RulePatch) -> dict[str, object]:
    """Tune one kind's rule (``kind`` as GET /api/alerts/rules names it; another is a 404 naming the kinds), audited
    as ``alerts.rule`` when something changed; answers the rule."""
    if kind not in KINDS:
        raise Http404(f"No kind of alert is called {kind[:40]!r}; the kinds: {', '.join(KINDS)}.")
    given = data.dict(exclude_unset=True)
    if nulls := [name for name, value in given.items() if value is None]:
        raise ConsoleError("; ".join(f"{name}: give a value, or leave the field out to keep it" for name in nulls))
    if "threshold" in given and not KINDS[kind].unit:  # the page offers none for it (a check's 5 was taken)
        raise ConsoleError(f"threshold: the {kind} rule has no threshold; leave the field out")
    rule = rules()[kind]
    form = RuleForm({name: getattr(rule, name) for name in RuleForm.Meta.fields} | given, instance=rule)
    if not form.is_valid():
        raise form_refusal(form)
    with transaction.atomic():
        if changes := form_changes(form):  # a save that changed nothing is no entry, as on the page
            record(None, "alerts.rule", form.save(), changes)
    return _rule(rule)


class DestinationOut(Schema):
    """Where alerts go: the webhook as its scheme and host only (``https://hooks.slack.com/…``; "" none), the email
    addresses (comma-separated; "" none) and the SMTP server email goes through (host:port)."""

    webhook: str
    email_to: str
    smtp_server: str


def _destination(destination: Destination) -> dict[str, str]:
    shown = {"webhook": shown_url(destination.webhook_url), "email_to": destination.email_to}
    return shown | {"smtp_server": smtp_server()}


@router.get("/alerts/destination", response=DestinationOut)
def get_destination(request: HttpRequest) -> dict[str, str]:
    return _destination(Destination.current())


class DestinationIn(Body):
    """Where alerts go (admins), as the Alerts page's form takes it: a field left out keeps its value (a script that
    sets the email need not know the webhook's secret); "" or null removes it. ``webhook_url``: an http or https
    URL (a Slack or Mattermost incoming webhook, at most 2,000 characters); ``email_to``: comma-separated
    addresses."""

    webhook_url: str | None = None
    email_to: str | None = None


@router.put("/alerts/destination", response=DestinationOut)
def set_destination(request: HttpRequest, data: DestinationIn) -> dict[str, str]:
    """Set where alerts go (DestinationForm's rules and words; a refused one is a 400 naming the field and changes
    nothing), audited as ``alerts.destination`` with the webhook as scheme and host only."""
    destination = Destination.current()
    given = {name: value or "" for name, value in data.dict(exclude_unset=True).items()}
    kept = {"webhook_url": destination.webhook_url, "email_to": destination.email_to}
    form = DestinationForm(kept | given, instance=destination)
    if not form.is_valid():
        raise form_refusal(form)
    changes = audited(form_changes(form))
    with transaction.atomic():
        if changes:
            record(None, "alerts.destination", form.save(), changes)
    return _destination(destination)


class ChannelResult(Schema):
    channel: str  # webhook or email
    to: str  # the webhook as its scheme and host only, or the email addresses
    sent: bool  # the webhook answered 2xx, or the SMTP server took the email
    error: str  # why not, in words without the webhook's secret; "" when sent


@router.post("/alerts/destination/test", response=list[ChannelResult])
def test_destination(request: HttpRequest) -> list[dict[str, object]]:
    """Send a test to each destination set up, now (admins; a webhook answers within 10 s), and answer what each did
    with it, audited as ``alerts.test``; 400 when none is set up. Nothing else is kept."""
    destination = Destination.current()
    if not destination.webhook_url and not destination.email_to:
        raise ConsoleError("Nothing to test: set a webhook URL or an email address first.")
    results = send_test(destination)
    record(None, "alerts.test", destination, {channel: why or "sent" for channel, why in results})
    shown = {"webhook": shown_url(destination.webhook_url), "email": destination.email_to}
    return [{"channel": c, "to": shown[c], "sent": not why, "error": why} for c, why in results]
