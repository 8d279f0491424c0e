"""Template context for every console page: the alerts firing now, for the header's list."""

from django.http import HttpRequest

from console.alerts.models import Alert
from console.alerts.visible import visible

SHOWN = 5  # alerts listed in the header; the rest are counted and on the Alerts page


def alerts(request: HttpRequest) -> dict[str, object]:
    """``firing``: up to SHOWN firing alerts the person sees (console.alerts.visible), newest first;
    ``firing_count``: how many fire in all of those."""
    if not request.user.is_authenticated:
        return {}
    found = visible(request.user, Alert.objects.filter(resolved_at=None, fired_at__isnull=False))
    found = found.select_related("rule").order_by("-fired_at")
    return {"firing": list(found[:SHOWN]), "firing_count": found.count()}
