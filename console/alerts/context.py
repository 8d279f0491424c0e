"""Template context for every console page: the alerts firing now, for the header's list."""

from django.http import HttpRequest

from console.alerts.models import Alert

SHOWN = 5  # alerts listed in the header; the rest are counted and on the Alerts page


def alerts(request: HttpRequest) -> dict[str, object]:
    """``firing``: up to SHOWN firing alerts, newest first; ``firing_count``: how many fire in all."""
    if not request.user.is_authenticated:
        return {}
    found = Alert.objects.filter(resolved_at=None, fired_at__isnull=False).select_related("rule").order_by("-fired_at")
    return {"firing": list(found[:SHOWN]), "firing_count": found.count()}
