"""The console's one way of writing a moment: 24-hour UTC with "UTC" after it (``2026-12-04 10:31:02 UTC``), as
the charts' axes and the tables' "(UTC)" headers read. Django renders in settings.TIME_ZONE, which is UTC; this
filter also takes the ISO 8601 strings some reports carry (a worker's pre-flight ``checked_at``)."""

from datetime import UTC, datetime

from django import template

register = template.Library()


@register.filter
def utc(value: datetime | str | None) -> str:
    """A datetime (aware, or naive meaning UTC) or an ISO 8601 string → ``"2026-12-04 10:31:02 UTC"``; None or
    "" → ``""``; a string that is no ISO 8601 time comes back as it was."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return value
    else:
        moment = value
    moment = moment.astimezone(UTC) if moment.tzinfo else moment
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"
