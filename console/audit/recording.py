"""Recording an action: ``record(actor, action, target, changes, request=None)``.

Domain code calls it inside the transaction of the change it records, so an action that rolls back
leaves no entry. The request in progress (set by ``AuditMiddleware``) gives the actor and where the
action came from when the caller passes neither; without one (a Celery task, a management command)
the actor is "system".
"""

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.http import HttpRequest, HttpResponse

from console.audit.models import AuditEntry

# action → what it means, in the words the audit page's filter shows
ACTIONS = {
    "key.create": "API key created",
    "key.rotate": "API key rotated",
    "key.revoke": "API key revoked",
    "key.limits": "API key limits changed",
    "member.create": "member added",
    "member.role": "member role changed",
    "member.limits": "member limits changed",
    "member.active": "member enabled or disabled",
    "member.password": "password changed",
    "deployment.create": "deployment created",
    "deployment.launch": "deployment launched",
    "deployment.stop": "deployment stopped",
    "deployment.change": "deployment settings changed",
    "deployment.remedy": "out-of-memory remedy applied",
    "deployment.delete": "deployment deleted",
    "deployment.sleep": "deployment put to sleep (by an admin or its idle policy)",
    "deployment.wake": "deployment woken (by a request or an admin)",
    "deployment.stop_idle": "deployment stopped to save (its idle policy)",
    "deployment.make_room": "room made for a deployment: others put to sleep or stopped to save, with the numbers",
    "deployment.idle_policy": "deployment idle policy changed",
    "deployment.limits": "deployment serving limits changed (max_tokens cap, fit max_tokens), at once",
    "deployment.register": "engine Hearth did not launch registered",
    "deployment.add_endpoint": "endpoint Hearth did not launch added as a replica",
    "deployment.remove_endpoint": "endpoint Hearth did not launch removed",
    "deployment.slo": "deployment SLO targets set (deployment page, Capacity page or API)",
    "slo.merged": "capacity check SLO kept aside when the two SLOs became one",
    "model.add": "model added",
    "model.delete": "model deleted",
    "weights.free": "weights freed from the weights cache",
    "price.set": "GPU price set",
    "deployment.price": "deployment price per million tokens set (or back to the one from its capacity)",
    "mapping.set": "metric mapping saved",
    "accounting.mended": "spending or tokens-per-day counter mended to the request log",
    "batch.cancel": "batch cancelled (on the Batches page)",
    "alerts.rule": "alert rule tuned",
    "alerts.destination": "alert destinations changed (a webhook shown as its scheme and host only)",
    "alerts.test": "a test sent to the alert destinations (each channel: sent, or why not)",
    "backup.create": "backup written (manage.py backup)",
    "backup.restore": "database restored from a backup: what changed since it was made is as it was then",
    "signin": "signed in",
    "signin.failed": "sign-in failed",
    "signin.lockout": "locked out after failed sign-ins",
    "signout": "signed out",
}
# actions no code records any more, whose entries the log still holds and the page still filters on
RETIRED_ACTIONS = {
    "capacity.slo": "capacity check SLO set (before it and the deployment's SLO became one)",
}
SYSTEM = "system"  # the actor of what no request asked for (a Celery task, a management command)
ANONYMOUS = "anonymous"  # the actor of a request nobody is signed in to (a failed sign-in)
_request: ContextVar[HttpRequest | None] = ContextVar("audit_request", default=None)


def record(
    actor: Any,
    action: str,
    target: models.Model | str | None,
    changes: dict[str, Any] | None = None,
    request: HttpRequest | None = None,
) -> AuditEntry:
    """Write one audit entry and return it.

    ``actor``: the user who acted, or None for the signed-in user of the request in progress (else
    "system"). ``target``: the model instance acted on, or a name (a username that failed to sign in).
    ``changes``: JSON-able facts (Decimals and datetimes become strings), never a secret. Raises
    ValueError for an action not in ACTIONS.
    """
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}; add it to console.audit.recording.ACTIONS")
    request = request or _request.get()
    user = getattr(request, "user", None)
    if actor is None and user is not None and user.is_authenticated:
        actor = user
    kind, pk, name = _target(target)
    meta = request.META if request is not None else {}
    return AuditEntry.objects.create(
        actor=actor if actor is not None and actor.pk else None,
        actor_name=actor.get_username() if actor is not None else ANONYMOUS if request is not None else SYSTEM,
        action=action,
        target_type=kind,
        target_id=pk,
        target_name=name[:200],
        changes=json.loads(json.dumps(changes or {}, cls=DjangoJSONEncoder)),
        ip=meta.get("REMOTE_ADDR") or None,
        user_agent=str(meta.get("HTTP_USER_AGENT", ""))[:300],
    )


def _target(target: models.Model | str | None) -> tuple[str, str, str]:
    if target is None:
        return "", "", ""
    if isinstance(target, str):
        return "", "", target
    return target._meta.label_lower, str(target.pk), str(target)


def changed(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """The fields whose values differ, as field → [before, after] (the shape of ``changes`` for an edit)."""
    return {k: [before.get(k), v] for k, v in after.items() if before.get(k) != v}


def form_changes(form: Any) -> dict[str, list[Any]]:
    """A bound, valid ModelForm's edited fields as field → [before, after] (``form.changed_data``; before is
    None for a new row)."""
    return {name: [form.initial.get(name), form.cleaned_data[name]] for name in form.changed_data}


@contextmanager
def acting_for(request: HttpRequest) -> Iterator[None]:
    """Within this block, ``record`` takes its actor and address from ``request``."""
    token = _request.set(request)
    try:
        yield
    finally:
        _request.reset(token)


class AuditMiddleware:
    """Makes each request the one ``record`` reads its actor and address from."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with acting_for(request):
            return self.get_response(request)
