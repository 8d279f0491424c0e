"""The audit log as the page and its exports filter it: by actor, action, target and time."""

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db.models import Q, QuerySet
from django.http import QueryDict
from django.utils import timezone

from console.audit.models import AuditEntry
from console.errors import ConsoleError

COLUMNS = ("at", "actor", "action", "target_type", "target_id", "target", "changes", "ip", "user_agent")


@dataclass(frozen=True)
class Filters:
    """What the log is narrowed to; empty strings and None mean no narrowing. ``since``/``until`` are
    whole UTC days, both included."""

    actor: str = ""
    action: str = ""
    target: str = ""
    since: date | None = None
    until: date | None = None

    @classmethod
    def from_query(cls, query: QueryDict) -> "Filters":
        """Filters from a query string (``?actor=&action=&target=&since=YYYY-MM-DD&until=YYYY-MM-DD``).

        Raises ConsoleError for a date that is not YYYY-MM-DD or a NUL character.
        """
        if any("\x00" in v for v in query.values()):
            raise ConsoleError("Filters may not contain NUL characters.")
        return cls(
            query.get("actor", "").strip()[:150],
            query.get("action", "").strip()[:40],
            query.get("target", "").strip()[:200],
            _day(query.get("since", "")),
            _day(query.get("until", "")),
        )

    def apply(self, entries: QuerySet[AuditEntry]) -> QuerySet[AuditEntry]:
        """``entries`` narrowed to these filters, newest first. An action ending in "." matches every
        action it begins (``key.`` is every key action)."""
        if self.actor:
            entries = entries.filter(actor_name__iexact=self.actor)
        if self.action:
            entries = (
                entries.filter(action__startswith=self.action)
                if self.action.endswith(".")
                else entries.filter(action=self.action)
            )
        if self.target:
            entries = entries.filter(Q(target_name__icontains=self.target) | Q(target_id=self.target))
        if self.since:
            entries = entries.filter(at__gte=datetime.combine(self.since, time.min, tzinfo=UTC))
        if self.until:
            entries = entries.filter(at__lt=datetime.combine(self.until + timedelta(days=1), time.min, tzinfo=UTC))
        return entries.order_by("-at", "-id")


def _day(text: str) -> date | None:
    if not text.strip():
        return None
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise ConsoleError(f"{text[:40]!r} is not a date; use YYYY-MM-DD.") from None


def as_row(entry: AuditEntry) -> dict[str, Any]:
    """One entry as the exports write it (COLUMNS; ``at`` in ISO 8601 UTC)."""
    return {
        "at": entry.at.isoformat(),
        "actor": entry.actor_name,
        "action": entry.action,
        "target_type": entry.target_type,
        "target_id": entry.target_id,
        "target": entry.target_name,
        "changes": entry.changes,
        "ip": entry.ip or "",
        "user_agent": entry.user_agent,
    }


def prune(retention_days: int) -> int:
    """Delete entries older than ``retention_days`` days; returns how many went."""
    cutoff = timezone.now() - timedelta(days=retention_days)
    return AuditEntry.objects.filter(at__lt=cutoff).delete()[0]
