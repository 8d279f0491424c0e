"""The audit log: one row per action a person (or the appliance itself) took."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditEntry(models.Model):
    """Who (``actor``, kept by name too, so a deleted user's entries still say who), when (``at``), from
    where (``ip``, ``user_agent``), what (``action``, one of console.audit.recording.ACTIONS) to what
    (``target_*``), and what changed (``changes``: field → [before, after], or the facts of a new thing).
    Never holds a secret: key entries name the key's prefix only."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor_name = models.CharField(max_length=150, help_text="The username then; 'system' for the appliance.")
    action = models.CharField(max_length=40, db_index=True)
    target_type = models.CharField(max_length=50, blank=True, help_text="app_label.model, e.g. access.apikey.")
    target_id = models.CharField(max_length=50, blank=True)
    target_name = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=300, blank=True)

    class Meta:
        indexes = (models.Index(fields=["target_type", "target_id"]),)
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.target_name}"

    def changes_in_words(self) -> list[tuple[str, str]]:
        """(field, "before → after") for an edit's pairs, else (field, the value), for the page; a missing or empty
        value reads "none" ("email_to: none → a@b.co", not ": → a@b.co")."""
        words = []
        for field, value in self.changes.items():
            if isinstance(value, list) and len(value) == 2:
                before, after = ("none" if v is None or v == "" else v for v in value)
                words.append((field, f"{before} → {after}"))
            else:
                words.append((field, "none" if value is None else str(value)))
        return words
