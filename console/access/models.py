"""Who may use the appliance: members with their roles and the limits an admin sets them, and the API keys
people hold for the /v1 endpoints, with their own limits."""

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone


def usd(help_text: str) -> models.DecimalField:  # type: ignore[type-arg]
    """An optional amount of USD, to the cent, up to 9,999,999,999.99."""
    return models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True, help_text=help_text)


class Role(models.TextChoices):
    """What a person may do in the console and /api (console.access.policy holds the table): an admin
    everything; a member sees deployments and panels and manages their own API keys within their limits;
    a viewer only looks."""

    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"


class Priority(models.TextChoices):
    """A key's class under saturation (gateway.lanes): *interactive* is never held; *standard* is held while its
    deployment is saturated; *batch* waits first and is charged at HEARTH_BATCH_PRICE_FACTOR of the price."""

    INTERACTIVE = "interactive"
    STANDARD = "standard"
    BATCH = "batch"


PRIORITY_HELP = (
    "Interactive: never held. Standard: held while the deployment is saturated. "
    "Batch: waits first, charged at the batch price factor."
)


class ApiKey(models.Model):
    """A long-lived key for people and their tools. Only its SHA-256 is stored (console.access.key_format);
    the key is shown once.

    Rotation gives the key a new secret (new ``prefix`` and ``key_hash``) and keeps the old one valid until
    ``previous_valid_until`` (the grace period its owner chose): ``secrets_at`` says which secrets
    authenticate at a given moment. Limits, budgets and usage stay with the key across rotations.
    """

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=20, unique=True, help_text="Public part, shown in lists and logs.")
    key_hash = models.CharField(max_length=64)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.SET_NULL,
        related_name="api_keys",
        help_text="Whose key it is: their member limits and budgets apply to it.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="None: never.")
    allowed_models = models.JSONField(default=list, blank=True, help_text="Served model names; empty: all.")
    max_tokens_cap = models.PositiveIntegerField(
        null=True, blank=True, help_text="Tokens; a request asking for more (or for no limit) is capped to this."
    )
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True, help_text="None: unlimited.")
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True, help_text="Prompt + completion tokens.")
    tokens_per_day = models.PositiveIntegerField(null=True, blank=True, help_text="Prompt + completion, UTC day.")
    max_concurrent = models.PositiveIntegerField(null=True, blank=True, help_text="Requests at once.")
    daily_budget_usd = usd("USD per UTC day; None: no budget.")
    monthly_budget_usd = usd("USD per UTC calendar month; None: no budget.")
    rotated_at = models.DateTimeField(null=True, blank=True, help_text="When the secret last changed.")
    previous_prefix = models.CharField(max_length=20, blank=True, db_index=True, help_text="The secret before.")
    previous_key_hash = models.CharField(max_length=64, blank=True)
    previous_valid_until = models.DateTimeField(
        null=True, blank=True, help_text="The previous secret is accepted until then (the rotation's grace)."
    )
    priority = models.CharField(
        max_length=12,
        choices=Priority.choices,
        blank=True,
        default="",
        help_text=f"Blank: the owner's default. {PRIORITY_HELP}",
    )

    class Meta:
        verbose_name = "API key"  # Django's default reads "api key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def effective_priority(self) -> str:
        """The class this key's requests run at: its own, else its owner member's default, else standard."""
        if self.priority:
            return self.priority
        member = getattr(self.owner, "member", None) if self.owner_id else None
        return member.default_priority if member is not None else Priority.STANDARD.value

    def is_live(self, at: datetime | None = None) -> bool:
        """Neither revoked nor expired at ``at`` (default now)."""
        at = at or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > at)

    def secrets_at(self, at: datetime | None = None) -> list[tuple[str, str, datetime | None]]:
        """The secrets that authenticate this key at ``at`` (default now), as (prefix, SHA-256 hex,
        valid until or None for no end): the current one while the key is live, and the previous one
        during a rotation's grace period. Empty once revoked or expired."""
        at = at or timezone.now()
        if not self.is_live(at):
            return []
        live = [(self.prefix, self.key_hash, self.expires_at)]
        grace = self.previous_valid_until
        if self.previous_prefix and grace is not None and grace > at:
            live.append((self.previous_prefix, self.previous_key_hash, min(grace, self.expires_at or grace)))
        return live


class Member(models.Model):
    """A person's role and the limits an admin sets on the keys they own.

    Limits are ceilings for each of the member's keys (a new key without a limit gets the ceiling;
    one above it is refused; lowering a ceiling lowers the keys above it), plus ``max_keys`` live keys
    at once. The budgets are totals over all the member's keys, which the gateway enforces.
    Superusers are admins whatever their row says; a user without a row is a viewer.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="member")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    allowed_models = models.JSONField(default=list, blank=True, help_text="Served model names; empty: all.")
    max_tokens_cap = models.PositiveIntegerField(null=True, blank=True, help_text="Tokens per request, per key.")
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True, help_text="Per key.")
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True, help_text="Per key.")
    tokens_per_day = models.PositiveIntegerField(null=True, blank=True, help_text="Per key, UTC day.")
    max_concurrent = models.PositiveIntegerField(null=True, blank=True, help_text="Requests at once, per key.")
    max_key_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="Expiry ceiling: each key expires within this many days; None: may never."
    )
    max_keys = models.PositiveIntegerField(null=True, blank=True, help_text="Live keys at once; None: any number.")
    daily_budget_usd = usd("USD per UTC day over all their keys.")
    monthly_budget_usd = usd("USD per UTC calendar month over all their keys.")
    oidc_subject = models.CharField(
        max_length=255, null=True, blank=True, unique=True, help_text="Their ``sub`` at the OpenID provider."
    )
    created_at = models.DateTimeField(default=timezone.now)
    default_priority = models.CharField(
        max_length=12, choices=Priority.choices, default=Priority.STANDARD, help_text=f"For their keys. {PRIORITY_HELP}"
    )

    def __str__(self) -> str:
        return f"{self.user} ({self.role})"
