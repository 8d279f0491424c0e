"""The names of Hearth's Redis keys, each under this appliance's instance name, so that two appliances
sharing one Redis server (even one database) never read or announce each other's state.

Every key Hearth writes is ``hearth:<HEARTH_INSTANCE>:<name>``: the routing version (console.fanout), the
gateway's quota counters (gateway.reservations), prices (console.observability.cost), the published GPU inventory
(appliance.hardware), a new key's sealed secret (console.access.shown_once). Django's cache and Celery's
broker get the same prefix in appliance.settings (the cache's ``KEY_PREFIX``, kombu's ``global_keyprefix``),
so queues, bindings and unacknowledged tasks keep apart too.
"""

from django.conf import settings


def redis_key(name: str) -> str:
    """``hearth:<HEARTH_INSTANCE>:<name>``, e.g. ``hearth:3f2a9c1b7d4e:routing-version``."""
    return f"{instance_prefix()}{name}"


def instance_prefix() -> str:
    """``hearth:<HEARTH_INSTANCE>:``, the prefix every Redis key of this appliance starts with."""
    return f"hearth:{settings.HEARTH_INSTANCE}:"
