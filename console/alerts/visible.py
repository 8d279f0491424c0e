"""Which alerts a person sees: admins and viewers every one (a viewer looks at the whole box, docs/teams.md); a member
every one but the budget alerts of other people's keys and of other members (a trial's member read a colleague's
spending in the header of every page); and how many of the past ones are listed (RECENT)."""

from typing import Any

from django.db.models import Q, QuerySet

from console.access.models import ApiKey, Role
from console.access.roles import role_of
from console.alerts.models import Alert

RECENT = 20  # resolved alerts and failed deliveries listed (the Alerts page, GET /api/alerts)
BUDGET = "budget"  # the rule kind whose subjects name a key or a member (console.alerts.conditions.budget)


def theirs(user: Any, prefix: str = "") -> Q:
    """The alerts ``user`` sees, as a filter on Alert (``prefix``: the lookup's path to Alert, e.g. "alert__")."""
    if role_of(user) != Role.MEMBER:
        return Q()
    own = Q(**{f"{prefix}subject__startswith": f"member {user.get_username()} "})
    for key_id in ApiKey.objects.filter(owner=user).values_list("pk", flat=True):  # by id: a rotation keeps it
        own |= Q(**{f"{prefix}subject__startswith": f"key {key_id} "})
    return ~Q(**{f"{prefix}rule__kind": BUDGET}) | own


def visible(user: Any, alerts: QuerySet[Alert]) -> QuerySet[Alert]:
    """``alerts`` less those ``user`` does not see (module docstring)."""
    return alerts.filter(theirs(user))
