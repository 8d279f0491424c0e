"""Template context for every console page."""

from django.http import HttpRequest

from appliance.hardware import InventoryError, current_inventory


def inventory(request: HttpRequest) -> dict[str, str]:
    """The GPU inventory in force, in words, for the header (so a simulated box is never mistaken for a real one)."""
    if not request.user.is_authenticated:
        return {}
    try:
        return {"inventory": current_inventory().describe()}
    except InventoryError as exc:
        return {"inventory": f"GPU inventory unreadable: {exc}"}
