"""Engines Hearth did not launch: registered as a deployment of their own or added to a deployment as a replica,
checked at every reconcile, removed by unregistering them. Hearth never starts, stops or restarts them.

Registration asks the address policy (appliance.address_policy), then the endpoint (console.deployments.
probing), and saves nothing unless the policy admits it and it answers as an OpenAI-compatible server with the
model to serve; an address HEARTH_EXTERNAL_ALLOW let through is named in the registration's audit entry. The
model is served under the name the engine lists it by (the gateway relays the client's ``model`` as it is). A
health check that fails, or finds the address refused by the policy now, takes the endpoint out of the routes
(``ready_at`` None, ``down_reason`` why) until one succeeds again. The engine key is stored sealed (Replica.
engine_api_key) and appears in no message, log line, page, export or audit entry.
"""

import logging
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction
from django.utils import timezone

from appliance.address_policy import Verdict, ascii_host
from console.audit.recording import record
from console.deployments.models import Deployment, DeploymentState, DesiredState, Replica
from console.deployments.naming import refuse_case_clash
from console.deployments.probing import CHECK_TIMEOUT, EndpointError, admitted, list_models, read_version
from console.errors import ConsoleError
from console.fanout import bump_routing_version
from console.names import NAME, SERVED_NAME, check_name
from engines.external import EXTERNAL_ENGINE, EXTERNAL_RUNTIME, ExternalKind, Listed, base_url_of, panels_fed
from engines.stored_plan import StoredPlan

log = logging.getLogger(__name__)
MAX_KEY = 300  # characters of an engine key: the sealed column holds up to this (Replica.engine_api_key)


def _checked(base_url: str, engine_kind: str, api_key: str) -> tuple[str, ExternalKind, str]:
    """(base URL, kind, key) as kept. Raises ConsoleError for a bad URL, an unknown kind or a key too long."""
    try:
        url = base_url_of(base_url)
    except ValueError as exc:
        raise ConsoleError(str(exc)) from None
    if len(url) > 500:
        raise ConsoleError("The base URL is over 500 characters.")
    try:
        ascii_host(urlsplit(url).hostname or "")
    except ValueError as exc:
        raise ConsoleError(f"The base URL's host: {exc}.") from None
    if engine_kind not in ExternalKind:
        raise ConsoleError(f"Unknown engine kind {engine_kind!r}: use one of {', '.join(ExternalKind)}.")
    key = api_key.strip()
    if len(key) > MAX_KEY or any(ch.isspace() or not ch.isprintable() for ch in key):
        raise ConsoleError(f"The engine API key must be up to {MAX_KEY} printable characters without spaces.")
    return url, ExternalKind(engine_kind), key


def _served_of(listed: list[Listed], model: str, base_url: str) -> Listed:
    """The listed model to serve: ``model`` when given, else the endpoint's only one."""
    ids = ", ".join(m.id for m in listed[:10]) + (", …" if len(listed) > 10 else "")
    if model.strip():
        found = [m for m in listed if m.id == model.strip()]
        if not found:
            raise ConsoleError(f"{base_url} does not serve {model.strip()!r}; it lists: {ids or 'nothing'}.")
        return found[0]
    if len(listed) != 1:
        raise ConsoleError(
            f"{base_url} lists {len(listed)} models ({ids or 'none'}): name the one to serve."
            if listed
            else f"{base_url} lists no model: it has nothing to serve yet."
        )
    return listed[0]


def _taken(served: str) -> None:
    """Raises ConsoleError when a deployment already serves ``served``."""
    other = Deployment.objects.filter(served_model_name=served).first()
    if other is not None:
        raise ConsoleError(
            f"The served model name {served!r} is already taken by the deployment {other.name!r}: "
            "remove that one first, or add this endpoint to it as a replica."
        )


def _allowance(verdict: Verdict) -> dict[str, object]:
    """The audit entry's note of the addresses HEARTH_EXTERNAL_ALLOW let through, when it let any."""
    return {"allowed_by_HEARTH_EXTERNAL_ALLOW": list(verdict.allowed_by)} if verdict.allowed_by else {}


def serving_words(kinds: Iterable[str]) -> str:
    """An external deployment's state reason while every endpoint answers: "Serving.", then which panels its
    endpoints' kinds cannot feed and what to do about it (engines.external.panels_fed), once per kind."""
    return " ".join(["Serving.", *sorted({note for kind in kinds if (note := panels_fed(kind))})])


def _new_replica(dep: Deployment, url: str, kind: ExternalKind, key: str, version: str) -> Replica:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    now = timezone.now()
    replica = Replica.objects.create(
        deployment=dep,
        runtime=EXTERNAL_RUNTIME,
        host=parts.hostname or "",
        port=port,
        url=url,
        engine_kind=kind,
        engine_version=version,
        engine_api_key=key,
        running=True,
        ready_at=now,
        checked_at=now,
    )
    replica.runtime_name = f"endpoint-{replica.pk}"
    replica.save(update_fields=["runtime_name"])
    return replica


def register(*, base_url: str, engine_kind: str, api_key: str = "", model: str = "", name: str = "") -> Deployment:
    """Register an endpoint as a new, ready deployment serving ``model`` (default: the one it lists) under that
    name; ``name`` the deployment's (default: the model's, its other characters made "-").

    Raises ConsoleError (EndpointError for the address and what the endpoint answered) with nothing saved: a bad
    URL, an address the policy refuses, an endpoint not reachable, a TLS failure, an endpoint that is not
    OpenAI-compatible, a model it does not list, a served model name or deployment name already taken.
    """
    url, kind, key = _checked(base_url, engine_kind, api_key)
    verdict = admitted(url)
    served = _served_of(list_models(url, key), model, url)
    served_name = check_name(served.id, "The endpoint's model name", SERVED_NAME)
    name = check_name(name or re.sub(r"[^A-Za-z0-9._-]", "-", served_name)[:100], "Deployment name", NAME)
    refuse_case_clash(name, served_name)
    _taken(served_name)
    version = read_version(kind, url, key)
    try:
        with transaction.atomic():
            dep = Deployment.objects.create(
                name=name,
                model=None,
                engine=EXTERNAL_ENGINE,
                served_model_name=served_name,
                max_model_len=served.max_model_len,
                kv_space_gib=0,
                plan=StoredPlan(None).to_json(),
                replica_count=0,
                state=DeploymentState.READY,
                state_reason=serving_words([kind]),
                desired=DesiredState.SERVING,
                engine_version=version,
            )
            _new_replica(dep, url, kind, key, version)
            record(
                None,
                "deployment.register",
                dep,
                {
                    "base_url": url,
                    "engine_kind": kind,
                    "engine_version": version,
                    "served_model_name": served_name,
                    "engine_api_key": "set" if key else "none",
                    **_allowance(verdict),
                },
            )
            transaction.on_commit(bump_routing_version)
    except IntegrityError:
        raise ConsoleError(f"A deployment named {name!r} or serving {served_name!r} already exists.") from None
    return dep


def add_endpoint(dep: Deployment, *, base_url: str, engine_kind: str, api_key: str = "") -> Replica:
    """Add an endpoint to ``dep`` as one more replica, routed beside its own; it must list the deployment's
    served model name. Raises ConsoleError (nothing saved) as ``register`` does, or when the deployment already
    has an endpoint at that URL."""
    url, kind, key = _checked(base_url, engine_kind, api_key)
    if dep.replicas.external().filter(url=url).exists():
        raise ConsoleError(f"{dep.name} already has the endpoint {url}.")
    verdict = admitted(url)
    listed = list_models(url, key)
    if not any(m.id == dep.served_model_name for m in listed):
        ids = ", ".join(m.id for m in listed[:10]) or "nothing"
        raise ConsoleError(
            f"{url} does not serve {dep.served_model_name!r} (it lists: {ids}); a replica must "
            "serve the deployment's model under its served name."
        )
    version = read_version(kind, url, key)
    with transaction.atomic():
        replica = _new_replica(dep, url, kind, key, version)
        record(
            None,
            "deployment.add_endpoint",
            dep,
            {
                "base_url": url,
                "engine_kind": kind,
                "engine_version": version,
                "engine_api_key": "set" if key else "none",
                **_allowance(verdict),
            },
        )
        transaction.on_commit(bump_routing_version)
    return replica


def remove_endpoint(dep: Deployment, replica_id: int) -> None:
    """Unregister one endpoint of ``dep`` (Hearth stops routing to it; the engine itself runs on). Raises
    ConsoleError for a replica Hearth launched, or the only endpoint of an external deployment (remove the
    deployment then)."""
    replica = dep.replicas.external().filter(pk=replica_id).first()
    if replica is None:
        raise ConsoleError(f"{dep.name} has no endpoint {replica_id} that Hearth did not launch.")
    if dep.external and dep.replicas.count() == 1:
        raise ConsoleError(f"It is the only endpoint of {dep.name}: remove the deployment to unregister it.")
    with transaction.atomic():
        # locked first, as admin_actions.delete_deployment does: a scrape storing rows of it waits, then fails
        list(Replica.objects.select_for_update().filter(pk=replica.pk).values_list("pk"))
        replica.delete()
        record(None, "deployment.remove_endpoint", dep, {"base_url": replica.url})
        transaction.on_commit(bump_routing_version)


def refused(dep: Deployment, action: str) -> None:
    """Raises ConsoleError when ``dep`` is external: Hearth does not ``action`` engines it did not launch."""
    if dep.external:
        raise ConsoleError(
            f"{dep.name} is served by engines Hearth did not launch: Hearth does not {action} them. "
            "Remove the deployment to stop routing to them."
        )


def _health(replica: Replica) -> str:
    """Empty when the endpoint answers its model list with the model in it, else why not: an address the policy
    refuses now (registered before it, or a name that resolves elsewhere since) is not asked, and says so."""
    try:
        listed = list_models(replica.url, replica.engine_api_key, timeout=CHECK_TIMEOUT)
    except EndpointError as exc:
        return str(exc)
    if not any(m.id == replica.deployment.served_model_name for m in listed):
        return f"It no longer lists {replica.deployment.served_model_name!r}."
    return ""


def check_endpoints() -> int:
    """One health check of every registered endpoint, in parallel: one going down leaves the routes, one coming
    back (its version read again) joins them. Returns how many answered."""
    replicas = list(Replica.objects.external().filter(running=True).select_related("deployment"))
    if not replicas:
        return 0
    with ThreadPoolExecutor(max_workers=min(16, len(replicas))) as pool:
        reasons = list(pool.map(_health, replicas))
    now, changed = timezone.now(), False
    for replica, reason in zip(replicas, reasons, strict=True):
        changed |= _note(replica, reason, now)
    for dep in {r.deployment_id: r.deployment for r in replicas}.values():
        if dep.external and dep.state == DeploymentState.READY:
            _say_how_many_answer(dep)
    if changed:
        bump_routing_version()
    return reasons.count("")


def _note(replica: Replica, reason: str, now: datetime) -> bool:
    """Record one check; True when the endpoint went down or came back (the routes change)."""
    was_up = replica.ready_at is not None
    fields: dict[str, object] = {"checked_at": now, "down_reason": reason}
    if reason and was_up:
        fields["ready_at"] = None
        log.warning("endpoint %s of %s is down: %s", replica.runtime_name, replica.deployment.name, reason)
    elif not reason and not was_up:
        fields["ready_at"] = now
        fields["engine_version"] = (
            read_version(replica.engine_kind, replica.url, replica.engine_api_key, CHECK_TIMEOUT)
            or replica.engine_version
        )
        log.info("endpoint %s of %s answers again", replica.runtime_name, replica.deployment.name)
    Replica.objects.filter(pk=replica.pk).update(**fields)
    return "ready_at" in fields


def _say_how_many_answer(dep: Deployment) -> None:
    endpoints = list(dep.replicas.external().order_by("pk"))
    down = [r for r in endpoints if r.ready_at is None]
    if not down:
        reason = serving_words(r.engine_kind for r in endpoints)
    elif len(down) == len(endpoints):
        reason = f"0 of {len(endpoints)} endpoints answering: {down[0].down_reason}"
    else:
        reason = f"{len(endpoints) - len(down)} of {len(endpoints)} endpoints answering; {down[0].runtime_name}: "
        reason += down[0].down_reason
    if reason != dep.state_reason:
        Deployment.objects.filter(pk=dep.pk, state=DeploymentState.READY).update(state_reason=reason)
