"""Who may use the appliance's /v1 endpoints: API keys and their limits."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiKey(models.Model):
    """A long-lived key for people and their tools. Only its SHA-256 is stored (console.access.key_format);
    the key is shown once."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=20, unique=True, help_text="Public part, shown in lists and logs.")
    key_hash = models.CharField(max_length=64)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
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

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
