"""Who a /v1 request is and where its model is, read from one route-table snapshot (gateway.snapshot): the keys it
offers, the one that authenticates (a Batch API line's credential names its batch owner's key:
gateway.batch_lines), the route of the model its body names, and a model object for GET /v1/models/{model}. Each
raises GatewayError in the gateway's shape (401, 400, 403, 404, 503) as gateway.errors words it.
"""

from typing import Any

from django.conf import settings

from console.access.key_format import key_prefix
from gateway import batch_lines, errors
from gateway.asgi_io import Scope
from gateway.errors import GatewayError
from gateway.model_list import model_objects
from gateway.snapshot import KeyEntry, Route, Snapshot
from gateway.snapshot import authenticate as authenticate_key


def offered_keys(scope: Scope) -> list[str]:
    """The keys offered in ``x-api-key`` and ``Authorization: Bearer``, in that order, empty ones left out.
    Raises GatewayError 401 when there is none."""
    headers: dict[bytes, bytes] = dict(scope["headers"])
    auth = headers.get(b"authorization", b"").decode("latin-1")
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    keys = [k for k in (headers.get(b"x-api-key", b"").decode("latin-1").strip(), bearer) if k]
    if not keys:
        scheme = auth.split(None, 1)[:1]
        raise errors.missing_key(unschemed=bool(scheme) and scheme[0].lower() != "bearer")
    return keys


def authenticate(snapshot: Snapshot, offered: list[str], scope: Scope | None = None) -> KeyEntry:
    """The live Hearth key among those the request offers (``offered_keys``): a client may send one header
    with its Hearth key and the other with something else (Claude Code with both ANTHROPIC_API_KEY and
    ANTHROPIC_AUTH_TOKEN set): the other one is ignored. Nothing else in the request names a key or a
    user (no identity header is believed). Raises GatewayError 401 when none authenticates, the most
    telling refusal first (expired or rotated out before wrong). A key refused although its secret matched
    (revoked, expired, rotated out: only its holder can have sent it) is noted in ``scope`` as ``hearth.key``,
    so that gateway.app logs the refusal's row under it (gateway.refusals)."""
    if (line := batch_lines.line_of(offered)) is not None:
        return batch_lines.owner(snapshot, line)
    refusals = []
    for key in offered:
        try:
            return authenticate_key(snapshot, key)
        except GatewayError as exc:
            refusals.append(exc)
            if exc != errors.invalid_key() and scope is not None:
                scope["hearth.key"] = snapshot.keys[key_prefix(key)]
    raise ([e for e in refusals if e != errors.invalid_key()] or refusals)[0]


def key_and_route(snapshot: Snapshot, offered: list[str], request: dict[str, Any]) -> tuple[KeyEntry, Route]:
    """The key that authenticates (``authenticate``) and the route of the body's model for it (``route_of``)."""
    entry = authenticate(snapshot, offered)
    return entry, route_of(request, snapshot, entry)


def model_object(snapshot: Snapshot, entry: KeyEntry, name: str) -> dict[str, object]:
    """The model object of ``name`` when this key may see it ready. Raises GatewayError 404 otherwise."""
    for model in model_objects(snapshot, entry):
        if model["id"] == name:
            return model
    raise _unknown(snapshot, entry, name)


def route_of(request: dict[str, Any], snapshot: Snapshot, entry: KeyEntry) -> Route:
    """The route of the body's model (one without upstreams for a model put aside: the request waits for its
    wake). A model the key may not use is 403 whatever its state, so a key learns nothing of the models it cannot
    use."""
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise GatewayError(400, "The request body needs a 'model' string.", param="model")
    if not entry.allows(model):
        raise errors.model_not_allowed(model, entry.allowed_models)
    route = snapshot.routes.get(model) or snapshot.asleep.get(model)
    if route is not None:
        return route
    if model in snapshot.states:
        retry = max(1, int(settings.HEARTH_RECONCILE_INTERVAL))
        raise errors.not_ready(model, snapshot.states[model], retry, snapshot.reasons.get(model, ""))
    raise _unknown(snapshot, entry, model)


def _unknown(snapshot: Snapshot, entry: KeyEntry, name: str) -> GatewayError:
    """The 404 of a model not deployed for this key, pointing at one this key may use named so but for case
    (ready, asleep, or in another state: Hearth refuses two names that differ only in case)."""
    deployed = (n for n in (*snapshot.routes, *snapshot.asleep, *snapshot.states) if entry.allows(n))
    cased = errors.same_but_case(name, deployed)
    return errors.unknown_model(name, [str(m["id"]) for m in model_objects(snapshot, entry)], cased)
