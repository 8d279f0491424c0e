"""The audit log: one row per action a person (or the appliance itself) took."""

import re
from datetime import UTC, datetime
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import models
from django.utils import timezone

# targets whose model's verbose name is not the console's word for them: a user is a "member" on every page
KIND_WORDS = {"auth.user": "member"}
# a datetime as ``record`` stores it (DjangoJSONEncoder: "2026-12-06T15:30:00.123Z") or as isoformat() writes it
ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})")


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

    def target_kind(self) -> str:
        """The kind of the target in words, for the page: its model's verbose name ("API key", "deployment";
        "member" for a user, KIND_WORDS), else ``target_type`` as stored (a model since removed); "" for none."""
        if self.target_type in KIND_WORDS:
            return KIND_WORDS[self.target_type]
        try:
            return str(apps.get_model(self.target_type)._meta.verbose_name)
        except (LookupError, ValueError):  # no such app or model; ValueError: not "app_label.model"
            return self.target_type

    def changes_in_words(self) -> list[tuple[str, str]]:
        """(field, "before → after") for an edit's pairs, else (field, the value), for the page. A missing or
        empty value reads "none" ("email_to: none → a@b.co", not ": → a@b.co"), True/False "on"/"off", and a
        datetime "YYYY-MM-DD HH:MM UTC"; the exports keep the values as stored."""
        words = []
        for field, value in self.changes.items():
            if isinstance(value, list) and len(value) == 2:
                words.append((field, f"{_value_in_words(value[0])} → {_value_in_words(value[1])}"))
            else:
                words.append((field, _value_in_words(value)))
        return words


def _value_in_words(value: Any) -> str:
    """One stored value (JSON: str, number, bool, None, list, dict) as the page shows it: None, "", [] or {} →
    "none", a list as its values in words joined by commas, True/False → "on"/"off", an ISO 8601 datetime with its
    offset → "YYYY-MM-DD HH:MM UTC", else ``str(value)``."""
    if value is None or value in ("", [], {}):
        return "none"
    if isinstance(value, list):
        return ", ".join(_value_in_words(v) for v in value)
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str) and ISO_DATETIME.fullmatch(value):
        try:
            return f"{datetime.fromisoformat(value).astimezone(UTC):%Y-%m-%d %H:%M} UTC"
        except ValueError:  # the shape of one, but no such day or hour ("2026-13-40T…")
            return value
    return str(value)
