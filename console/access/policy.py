"""Who may reach which URL: one table for every console page and /api operation, enforced by
``console.access.middleware.RoleMiddleware`` before any view runs.

Pages are keyed by URL name, with the roles allowed to read them (GET, HEAD) and to act on them (POST
and the rest). /api operations are keyed by method and path as the OpenAPI schema writes them
(``DELETE /api/keys/{pk}``). A URL missing from the table is refused to everyone (and logged), and
tests/test_roles.py walks the whole URLconf so that a new URL cannot go unlisted. Which of their own
things a member may touch (their keys, their usage) is the views' and domain's check, not the table's.
"""

import re
from typing import Final, Literal

from django.urls import ResolverMatch

from console.access.models import Role

PUBLIC: Final = "public"  # no sign-in needed
Access = frozenset[Role] | Literal["public"]

ALL: Final = frozenset(Role)
ADMINS: Final = frozenset({Role.ADMIN})
KEY_HOLDERS: Final = frozenset({Role.ADMIN, Role.MEMBER})  # viewers hold no keys
NOBODY: Final = frozenset[Role]()

# URL name → (read, act)
PAGES: dict[str, tuple[Access, Access]] = {
    "home": (ALL, NOBODY),
    "access:setup": (PUBLIC, PUBLIC),  # answers only while no user exists
    "access:login": (PUBLIC, PUBLIC),
    "access:logout": (PUBLIC, PUBLIC),
    "access:oidc_start": (PUBLIC, NOBODY),
    "access:oidc_callback": (PUBLIC, NOBODY),
    "access:password": (ALL, ALL),
    "access:keys": (ALL, KEY_HOLDERS),  # viewers see every key, members their own
    "access:key": (ALL, KEY_HOLDERS),
    "access:rotate": (NOBODY, KEY_HOLDERS),
    "access:revoke": (NOBODY, KEY_HOLDERS),
    "access:members": (ADMINS, ADMINS),
    "access:member": (ADMINS, ADMINS),
    "access:member_password": (NOBODY, ADMINS),
    "audit:log": (ADMINS, NOBODY),
    "audit:export_csv": (ADMINS, NOBODY),
    "audit:export_json": (ADMINS, NOBODY),
    "catalog:models": (ALL, ADMINS),
    "catalog:delete": (NOBODY, ADMINS),
    "catalog:demo-plan": (NOBODY, ADMINS),  # adds the demo model, then opens the deployment form
    "weights:cache": (ADMINS, NOBODY),  # the weights cache (console.weights): what is on disk, who uses it
    "weights:free": (NOBODY, ADMINS),
    "deployments:list": (ALL, ADMINS),
    "deployments:plan": (NOBODY, ADMINS),
    "deployments:detail": (ALL, NOBODY),
    "deployments:status": (ALL, NOBODY),
    "deployments:logs": (ALL, NOBODY),
    "deployments:launch": (NOBODY, ADMINS),
    "deployments:stop": (NOBODY, ADMINS),
    "deployments:sleep": (NOBODY, ADMINS),  # sharing the GPUs over time (console.deployments.idle_actions)
    "deployments:wake": (NOBODY, ADMINS),
    "deployments:change": (ADMINS, ADMINS),
    "deployments:remedy": (NOBODY, ADMINS),
    "deployments:delete": (NOBODY, ADMINS),
    "deployments:export": (ALL, NOBODY),  # cluster exports hold no key
    "deployments:external": (ADMINS, ADMINS),  # register an engine Hearth did not launch
    "deployments:add-endpoint": (ADMINS, ADMINS),
    "deployments:remove-endpoint": (NOBODY, ADMINS),
    "deployments:export-file": (ALL, NOBODY),
    "observability:panel": (ALL, NOBODY),
    "observability:dashboard": (ALL, NOBODY),
    "observability:dashboard_live": (ALL, NOBODY),
    "observability:series": (ALL, NOBODY),
    "observability:slo": (ALL, ADMINS),
    "observability:requests": (ALL, NOBODY),  # members see their own keys' requests
    "observability:requests_csv": (ALL, NOBODY),  # the same rows as the page, as CSV
    "observability:costs": (ALL, ADMINS),
    "observability:mappings": (ALL, ADMINS),
    "preflight:page": (ALL, NOBODY),
    "preflight:checks": (ALL, NOBODY),
    "preflight:settings": (ADMINS, NOBODY),  # the effective configuration and versions (secrets as set or unset)
    "preflight:bundle": (ADMINS, NOBODY),
    "alerts:page": (ALL, NOBODY),  # what fires, the rules and where alerts go (the webhook as scheme and host)
    "alerts:rule": (NOBODY, ADMINS),
    "alerts:destination": (NOBODY, ADMINS),
    "alerts:test": (NOBODY, ADMINS),  # a test sent to the destinations set up
    "usage:page": (ALL, NOBODY),  # members see their own keys' usage
    "usage:export_csv": (ALL, NOBODY),
    "batches:list": (ALL, NOBODY),  # members see their own keys' batches (console.batches.views)
    "batches:guessed": (ALL, NOBODY),  # /batches/, sent on to batches:list
    "batches:table": (ALL, NOBODY),
    "batches:detail": (ALL, NOBODY),
    "batches:progress": (ALL, NOBODY),
    "batches:cancel": (NOBODY, KEY_HOLDERS),  # a member cancels their own keys' batches
    "batches:file": (KEY_HOLDERS, NOBODY),  # the lines' content: the key's holder and admins, not viewers
    "capacity:deployment": (ALL, ADMINS),  # capacity checks (console.capacity): admins run them, all read them
    "capacity:slo": (NOBODY, ADMINS),
    "capacity:tune": (NOBODY, ADMINS),
    "capacity:run": (ALL, NOBODY),
    "capacity:run-status": (ALL, NOBODY),
    "capacity:cancel": (NOBODY, ADMINS),
    "capacity:export-json": (ALL, NOBODY),
    "capacity:export-csv": (ALL, NOBODY),
    "capacity:compare": (ALL, NOBODY),
    "capacity:tuning": (ALL, NOBODY),
    "capacity:tuning-status": (ALL, NOBODY),
    "capacity:tuning-cancel": (NOBODY, ADMINS),
    "capacity:tuning-apply": (NOBODY, ADMINS),
    "api:api-root": (ALL, NOBODY),
    "api:openapi-json": (ALL, NOBODY),
    "api:openapi-view": (ALL, NOBODY),
}

# "METHOD /api/path" → roles
API: dict[str, Access] = {
    "GET /api/models": ALL,
    "GET /api/models/demo": ALL,
    "POST /api/models": ADMINS,
    "DELETE /api/models/{pk}": ADMINS,
    "POST /api/plan": ADMINS,
    "GET /api/deployments": ALL,
    "POST /api/deployments": ADMINS,
    "GET /api/deployments/{pk}": ALL,
    "DELETE /api/deployments/{pk}": ADMINS,
    "POST /api/external-deployments": ADMINS,
    "POST /api/deployments/{pk}/endpoints": ADMINS,
    "DELETE /api/deployments/{pk}/endpoints/{replica_id}": ADMINS,
    "POST /api/deployments/{pk}/launch": ADMINS,
    "POST /api/deployments/{pk}/stop": ADMINS,
    "POST /api/deployments/{pk}/sleep": ADMINS,
    "POST /api/deployments/{pk}/wake": ADMINS,
    "POST /api/deployments/{pk}/change": ADMINS,
    "POST /api/deployments/{pk}/capacity-checks": ADMINS,
    "GET /api/deployments/{pk}/capacity-checks": ALL,
    "GET /api/capacity-checks/compare": ALL,
    "GET /api/capacity-checks/{pk}": ALL,
    "GET /api/capacity-checks/{pk}/export": ALL,
    "POST /api/capacity-checks/{pk}/cancel": ADMINS,
    "POST /api/deployments/{pk}/slo": ADMINS,
    "POST /api/deployments/{pk}/tunings": ADMINS,
    "GET /api/tunings/{pk}": ALL,
    "POST /api/tunings/{pk}/{action}": ADMINS,
    "POST /api/deployments/{pk}/remedy": ADMINS,
    "GET /api/deployments/{pk}/metrics": ALL,
    "PUT /api/deployments/{pk}/price": ADMINS,
    "GET /api/deployment-prices": ALL,  # the Costs page's table, which everyone reads
    "GET /api/gpu-prices": ALL,
    "POST /api/gpu-prices": ADMINS,
    "GET /api/deployments/{pk}/export": ALL,
    "GET /api/deployments/{pk}/export/{target}": ALL,
    "GET /api/doctor": ALL,
    "GET /api/keys": ALL,  # viewers see every key, members their own
    "POST /api/keys": KEY_HOLDERS,
    "PATCH /api/keys/{pk}": KEY_HOLDERS,
    "DELETE /api/keys/{pk}": KEY_HOLDERS,
    "POST /api/keys/{pk}/rotate": KEY_HOLDERS,
    "GET /api/members": ADMINS,
    "POST /api/members": ADMINS,
    "PATCH /api/members/{pk}": ADMINS,
    "GET /api/usage": ALL,  # members see their own keys' usage
    "GET /api/audit": ADMINS,
    "GET /api/alerts": ALL,  # members see every alert but others' budget alerts (console.alerts.visible)
    "GET /api/alerts/rules": ALL,
    "PATCH /api/alerts/rules/{kind}": ADMINS,
    "GET /api/alerts/destination": ALL,  # the webhook as scheme and host, as on the Alerts page
    "PUT /api/alerts/destination": ADMINS,
    "POST /api/alerts/destination/test": ADMINS,
}

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_PARAM = re.compile(r"<(?:\w+:)?(\w+)>")


def api_operation(match: ResolverMatch, method: str) -> str | None:
    """``"METHOD /api/path"`` for an /api operation (HEAD as GET), None for a page."""
    if match.namespace != "api" or f"api:{match.url_name}" in PAGES:
        return None
    path = _PARAM.sub(r"{\1}", match.route)
    return f"{'GET' if method == 'HEAD' else method} /{path}"


def api_methods(path: str) -> set[str]:
    """The methods the table lists for one /api path (``/api/keys/{pk}``)."""
    return {key.split(" ", 1)[0] for key in API if key.split(" ", 1)[1] == path}


def allowed(match: ResolverMatch, method: str) -> Access | None:
    """Who may make this request; None when the table does not list its URL (refuse it)."""
    operation = api_operation(match, method)
    if operation is not None:
        return API.get(operation)
    rule = PAGES.get(match.view_name)
    if rule is None:
        return None
    return rule[0] if method in SAFE_METHODS else rule[1]
