"""Sending an alert's news: a webhook's JSON body and an email, one attempt at a time (tasks.deliver retries with
backoff). A webhook URL's path and query may hold a secret (Slack's and Mattermost's do): only its scheme and host
are ever logged, stored in an error or shown (``shown_url``).

The webhook body (schema version 1, stable: fields are only ever added)::

    {"schema": "hearth.alert/1", "event": "fired" | "repeated" | "resolved" | "test",
     "alert": {"id": int, "kind": str, "title": str, "subject": str, "about": str, "message": str,
               "since": ISO 8601, "fired_at": ISO 8601 | null, "resolved_at": ISO 8601 | null},
     "console_url": str ("" without HEARTH_HOSTNAME), "text": str, "appliance": str}

``subject`` names what the alert is about as it stays while it holds (``key 17 today at the rule's threshold``: a key
rotated or a threshold tuned keeps it); ``about`` says it as people read it, with the key's prefix and name and the
percent of now (models.Alert.about), as an email's subject does.

``text`` is one line for a Slack or Mattermost incoming webhook, which post it as it is, naming the appliance that
sent it (``appliance_name``: two boxes, or a box and its restored copy, may alert the same people). An email's
subject is that line's head (the event, the rule, what it is about); its body the whole line, then the rest.
A test an admin sends from the Alerts page (``send_test``) has the event "test", an alert of kind "test" with id 0,
and is tried once, at once.
"""

import logging
import socket
from datetime import datetime
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from console.alerts.models import Channel, Delivery, Destination, Event
from console.alerts.rules import KINDS

log = logging.getLogger(__name__)
SCHEMA = "hearth.alert/1"
TIMEOUT = 10.0  # seconds a webhook may take to answer
MAX_ATTEMPTS = 6  # tries before a delivery is given up: with BACKOFF doubling, over about 10 minutes
BACKOFF = 10.0  # seconds before the first retry, doubling after each failure
WORDS = {Event.FIRED: "FIRING", Event.REPEATED: "STILL FIRING", Event.RESOLVED: "RESOLVED"}


def shown_url(url: str) -> str:
    """``https://hooks.slack.com/…``: a webhook URL as it may be logged or shown (scheme and host only)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…" if url else ""  # (no user:password@)


def audited(changes: dict[str, list[object]]) -> dict[str, list[object]]:
    """``changes`` of a Destination (console.audit.recording.form_changes) as its audit entry keeps them: the webhook
    a secret, so whether it was set, never what (``shown_url``, "another path" where only the path changed)."""
    if "webhook_url" in changes:
        before, after = (shown_url(str(url or "")) or "none" for url in changes["webhook_url"])
        changes = changes | {"webhook_url": [before, f"{after} (another path)" if after == before else after]}
    return changes


def smtp_server() -> str:
    """Where email goes, as host:port (Django's EMAIL_HOST and EMAIL_PORT)."""
    return f"{settings.EMAIL_HOST}:{settings.EMAIL_PORT}"


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None


def appliance_name() -> str:
    """The name alerts give this appliance: HEARTH_HOSTNAME, else the machine's host name (a compose container's is
    its id: HEARTH_HOSTNAME names the box)."""
    return settings.HEARTH_HOSTNAME or socket.gethostname()


def body(d: Delivery) -> dict[str, object]:
    """The webhook's JSON body for a delivery (module docstring)."""
    alert, kind = d.alert, d.alert.rule.kind
    title = KINDS[kind].title
    said = alert.resolved_message if d.event == Event.RESOLVED else alert.message
    console = f"https://{settings.HEARTH_HOSTNAME}/alerts/" if settings.HEARTH_HOSTNAME else ""
    return {
        "schema": SCHEMA,
        "event": d.event,
        "alert": {
            "id": alert.pk,
            "kind": kind,
            "title": title,
            "subject": alert.subject,
            "about": alert.about,
            "message": said,
            "since": _iso(alert.since),
            "fired_at": _iso(alert.fired_at),
            "resolved_at": _iso(alert.resolved_at),
        },
        "console_url": console,
        "text": f"[Hearth {appliance_name()}] {WORDS[Event(d.event)]}: {title}: {said}",
        "appliance": appliance_name(),
    }


def planned(alert_id: int, event: str, destination: Destination) -> list[Delivery]:
    """The deliveries of one piece of news to each channel set up (none while none is)."""
    channels = [
        c for c, on in ((Channel.WEBHOOK, destination.webhook_url), (Channel.EMAIL, destination.email_to)) if on
    ]
    return [Delivery.objects.create(alert_id=alert_id, event=event, channel=c) for c in channels]


def attempt(delivery_id: int) -> float | None:
    """Try a delivery once: None when done (sent, given up or gone), else seconds to wait before the next try
    (BACKOFF doubling). A failure is counted and kept in words on the row; the webhook's URL never in them."""
    with transaction.atomic():
        # the delivery's row only: locking its alert and rule too, two channels' deliveries of one alert tried at
        # once (the worker's and another's) deadlocked on the rule's row (a full test run saw it)
        deliveries = Delivery.objects.select_for_update(of=("self",)).select_related("alert__rule")
        d = deliveries.filter(pk=delivery_id).first()
        if d is None or d.sent_at is not None or d.given_up:
            return None
        destination = Destination.current()
        d.attempts += 1
        try:
            _deliver(Channel(d.channel), body(d), destination)
        except (httpx.HTTPError, OSError, ValueError) as exc:
            d.last_error = _words(exc, destination)
            d.given_up = d.attempts >= MAX_ATTEMPTS
            log.warning(
                "alert %s %s by %s failed (try %d): %s", d.alert_id, d.event, d.channel, d.attempts, d.last_error
            )
        else:
            d.sent_at = timezone.now()  # its last failure stays: the page lists it as sent after retries
        d.save(update_fields=["attempts", "sent_at", "given_up", "last_error"])
    if d.sent_at is not None or d.given_up:
        return None
    return BACKOFF * 2.0 ** (int(d.attempts) - 1)


def body_for_test() -> dict[str, object]:
    """The webhook's JSON body for a test of the destinations (module docstring): no alert fired."""
    now = _iso(timezone.now())
    console = f"https://{settings.HEARTH_HOSTNAME}/alerts/" if settings.HEARTH_HOSTNAME else ""
    said = "A test sent from the Alerts page: this destination gets Hearth's alerts. No alert fired."
    alert = {"id": 0, "kind": "test", "title": "Test", "subject": "alert destinations", "about": "alert destinations"}
    alert["message"] = said
    return {
        "schema": SCHEMA,
        "event": "test",
        "alert": {**alert, "since": now, "fired_at": now, "resolved_at": None},
        "console_url": console,
        "text": f"[Hearth {appliance_name()}] TEST: {said}",
        "appliance": appliance_name(),
    }


def send_test(destination: Destination) -> list[tuple[str, str]]:
    """Send a test (``body_for_test``) to each channel set up, once each, now (a webhook answers within TIMEOUT seconds;
    an SMTP server within EMAIL_TIMEOUT): ``[(channel, "")]`` for a channel that took it, ``[(channel, why)]`` for one
    that did not, the reason in words without the webhook's secret. Nothing is kept but the caller's audit entry."""
    payload, results = body_for_test(), []
    for channel, on in ((Channel.WEBHOOK, destination.webhook_url), (Channel.EMAIL, destination.email_to)):
        if not on:
            continue
        try:
            _deliver(channel, payload, destination)
        except (httpx.HTTPError, OSError, ValueError) as exc:
            log.warning("a test of the alert destinations by %s failed: %s", channel, _words(exc, destination))
            results.append((str(channel), _words(exc, destination)))
        else:
            results.append((str(channel), ""))
    return results


def _deliver(channel: Channel, payload: dict[str, object], destination: Destination) -> None:
    """``payload`` (``body`` or ``body_for_test``) to ``channel``; raises what the webhook or SMTP server raised, or
    ValueError for a webhook answering 3xx to 5xx or a channel no longer set up."""
    if channel == Channel.WEBHOOK:
        if not destination.webhook_url:
            raise ValueError("no webhook URL is set any more")
        resp = httpx.post(destination.webhook_url, json=payload, timeout=TIMEOUT, follow_redirects=False)
        if resp.status_code >= 300:
            raise ValueError(f"{shown_url(destination.webhook_url)} answered {resp.status_code}")
        return
    to = [a.strip() for a in destination.email_to.split(",") if a.strip()]
    if not to:
        raise ValueError("no email address is set any more")
    alert = payload["alert"]
    assert isinstance(alert, dict)
    lines = [str(payload["text"]), "", f"About: {alert['about']}", f"Since: {alert['since']} (held from then)"]
    if alert.get("resolved_at"):  # a trial's RESOLVED email said when it began and not when it ended
        lines.append(f"Resolved: {alert['resolved_at']}")
    if payload["console_url"]:
        lines.append(f"Console: {payload['console_url']}")
    head = "TEST" if payload["event"] == "test" else f"{WORDS[Event(str(payload['event']))]}: {alert['title']}"
    subject = f"[Hearth {payload['appliance']}] {head}: {alert['about']}"
    send_mail(subject[:200], "\n".join(lines), None, to)


def _words(exc: Exception, destination: Destination) -> str:
    """An error in words without the webhook's secret (an httpx error may quote the whole URL)."""
    text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc)
    url = destination.webhook_url
    if url:
        text = text.replace(url, shown_url(url))
        parts = urlsplit(url)
        for secret in (parts.path, parts.query, parts.password or "", parts.username or ""):
            if len(secret) > 1:
                text = text.replace(secret, "…")
    return text[:500]
