"""Alerts' tables: the rules (one per kind, console.alerts.rules gives each its default), the alerts they raised,
each delivery of an alert's news to a webhook or by email, and where to send them (one row)."""

from django.db import models
from django.utils import timezone

from console.access.models import ApiKey
from console.sealed import SealedCharField

# A budget alert's lower level as its subject names it (console.alerts.conditions.budget): not by its percent, which an
# admin tunes; ``Alert.about`` says the percent of now.
THRESHOLD = "the rule's threshold"


class AlertRule(models.Model):
    """One kind of alert as an admin tuned it: on or off, its threshold (unit per kind: rules.KINDS), how long
    the condition must hold before it fires (minutes; 0: at once) and how often it repeats while it holds."""

    kind = models.CharField(max_length=30, unique=True)
    enabled = models.BooleanField(default=True)
    threshold = models.FloatField(help_text="In the kind's unit (rules.KINDS).")
    for_minutes = models.FloatField(help_text="Minutes the condition holds before the alert fires; 0: at once.")
    repeat_minutes = models.FloatField(help_text="Minutes between repeats while it holds.")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"rule {self.kind}"


class Alert(models.Model):
    """One condition of one subject (a deployment, a replica, a key's daily budget …): seen holding ``since``,
    fired at ``fired_at`` once it held the rule's ``for_minutes`` (None: not yet), news last sent at
    ``last_sent_at``, and resolved at ``resolved_at`` (None: open). At most one open alert per kind and subject."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    subject = models.CharField(max_length=200, help_text="What it is about, e.g. deployment llama.")
    message = models.TextField(help_text="The condition in words, as last seen.")
    since = models.DateTimeField(default=timezone.now)
    fired_at = models.DateTimeField(null=True, blank=True)
    last_sent_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_message = models.TextField(blank=True)

    class Meta:
        constraints = (
            models.UniqueConstraint(
                fields=["rule", "subject"], condition=models.Q(resolved_at=None), name="one_open_alert_per_subject"
            ),
        )
        indexes = (models.Index(fields=["resolved_at", "fired_at"]),)

    def __str__(self) -> str:
        return f"{self.rule.kind}: {self.subject}"

    @property
    def about(self) -> str:
        """The subject as people read it (the Alerts page, an email's subject): a budget alert's ``key <id>`` as that
        key's prefix and name of now, its "the rule's threshold" as the rule's percent of now, e.g. ``key hk-3UTM (g)
        today at 80 %``; another subject, or a key gone, as it is."""
        about = self.subject.removesuffix(THRESHOLD) + (
            f"{self.rule.threshold:g} %" if self.subject.endswith(THRESHOLD) else ""
        )
        what, _, rest = about.partition(" ")
        key_id, _, period = rest.partition(" ")
        if what == "key" and key_id.isdigit() and (key := ApiKey.objects.filter(pk=int(key_id)).first()) is not None:
            return f"key {key.prefix} ({key.name}) {period}"
        return about


class Event(models.TextChoices):
    FIRED = "fired"
    REPEATED = "repeated"
    RESOLVED = "resolved"


class Channel(models.TextChoices):
    WEBHOOK = "webhook"
    EMAIL = "email"


class Delivery(models.Model):
    """One piece of news of an alert to one channel: tried ``attempts`` times (tasks.deliver retries with
    backoff), sent at ``sent_at`` (None: not yet, or given up: ``given_up``), ``last_error`` the last failure in
    words (never the webhook's URL beyond its scheme and host), kept once a retry is sent ("" : none failed)."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=10, choices=Event.choices)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    created_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveSmallIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    given_up = models.BooleanField(default=False)
    last_error = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"{self.event} of alert {self.alert_id} by {self.channel}"


class Destination(models.Model):
    """Where alerts go (one row, pk 1): a webhook URL (its path and query may hold a secret, as a Slack webhook's
    does: stored sealed, console.sealed, so a database dump or a backup holds none; shown and logged as scheme and
    host only) and email addresses (comma-separated; sent through Django's SMTP settings)."""

    # up to 2,000 characters (DestinationForm), sealed: about 1.4 × + 110, so 3,000 stored
    webhook_url = SealedCharField(max_length=3000, blank=True)
    email_to = models.CharField(max_length=1000, blank=True, help_text="Comma-separated addresses.")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return "alert destinations"

    @classmethod
    def current(cls) -> "Destination":
        """The one row, made empty the first time."""
        return cls.objects.get_or_create(pk=1)[0]
