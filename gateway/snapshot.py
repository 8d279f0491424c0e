"""What one gateway process knows of keys and deployments, read from the database at once (``load_snapshot``):
every key's secrets, each ready model's route, every deployment's state and, for one put aside to share the GPUs
(asleep, going to sleep, waking, or stopped to save: console.deployments.models.Deployment.asleep_or_saving) or
stopped with the appliance while wanted serving (``relaunch_due``: the worker launches it again), the route a
request for it is planned with while it waits for the wake (gateway.holding). gateway.registry keeps it
fresh; nothing here reads the database on a request's path.
"""

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db.models import F, OuterRef, Subquery

from console.access.key_format import key_prefix, matches
from console.access.models import ApiKey
from console.deployments.engine_flags import schedules_by_priority
from console.deployments.models import Deployment, DeploymentEvent, DeploymentState, Replica
from engines import external
from engines.launch import speaks_anthropic, speaks_responses
from gateway import errors
from gateway.quotas import Quota, quota_of


@dataclass(frozen=True)
class Upstream:
    """One ready replica: where it listens (``http://host:port``, or an external endpoint's base URL, which may be
    https and have a path), the key its engine demands ("" for an external endpoint that demands none), and
    whether it is an endpoint Hearth did not launch (connected to only where the address policy allows)."""

    replica_id: int
    base_url: str
    engine_api_key: str
    external: bool = False


@dataclass(frozen=True)
class Route:
    """Where a served model name goes: its ready replicas; or, for a deployment put aside to share the GPUs or stopped
    with the appliance while wanted serving (``asleep``), none yet: a request for it waits for its wake (its launch
    again; gateway.holding), planned with this route."""

    served_model_name: str
    upstreams: tuple[Upstream, ...]
    max_model_len: int
    created: int  # Unix seconds the deployment became ready, as OpenAI's model object has it
    speaks_anthropic: bool = True  # else the gateway translates /v1/messages to the chat API
    max_tokens_cap: int | None = None  # the deployment's own cap on generated tokens per request
    speaks_responses: bool = True  # else the gateway translates /v1/responses to the chat API
    fit_max_tokens: bool = False  # lower an output limit over the context left to what it leaves (context_fit)
    deployment_id: int = 0  # whose price per token the key's budgets are charged at (gateway.reservations)
    asleep: bool = False  # put aside (asleep, going to sleep, waking, stopped to save): no upstream until woken
    priority_scheduling: bool = False  # its engine orders its queue by the request's priority field (gateway.lanes)
    max_num_seqs: int = 0  # requests one replica's engine runs at once, as Hearth launched it; 0: not known


@dataclass(frozen=True)
class KeyEntry:
    """One secret of a live API key as the gateway needs it; ``allowed_models`` empty means every model.

    A rotated key has two entries under its two prefixes, one key ``id`` (so one set of quotas): the
    current secret, and the previous one with ``grace_until`` set (console.access.models.ApiKey.secrets_at).
    """

    id: int
    prefix: str
    key_hash: str
    allowed_models: frozenset[str]
    max_tokens_cap: int | None
    expires_at: float | None  # Unix seconds
    quota: Quota = field(default_factory=Quota)
    grace_until: float | None = None  # Unix seconds: this is the previous secret, accepted until then
    revoked_at: float | None = None  # Unix seconds: the key was revoked then, and is refused saying so
    priority: str = "standard"  # the key's effective class (console.access.models.ApiKey.effective_priority)

    def allows(self, model: str) -> bool:
        return not self.allowed_models or model in self.allowed_models


@dataclass
class Snapshot:
    keys: dict[str, KeyEntry] = field(default_factory=dict)  # by public prefix, previous secrets' too
    routes: dict[str, Route] = field(default_factory=dict)  # ready models
    states: dict[str, str] = field(default_factory=dict)  # every deployed model → its state
    asleep: dict[str, Route] = field(default_factory=dict)  # models put aside to share the GPUs (Route.asleep)
    reasons: dict[str, str] = field(default_factory=dict)  # every model without a route → its state's reason
    # a model put aside → its last wake that failed while it stayed so (no room was made): (Unix s, why)
    not_woken: dict[str, tuple[float, str]] = field(default_factory=dict)


def _seconds(at: datetime | None) -> float | None:
    return at.timestamp() if at is not None else None


def key_entries(key: ApiKey) -> list[KeyEntry]:
    """The entries of a key: its current secret, and its previous one while it has one (kept after its grace,
    so that its holder hears it was rotated rather than that it is wrong), each with when the key was revoked,
    if it was."""
    quota = quota_of(key)
    revoked = _seconds(key.revoked_at)
    current = KeyEntry(
        key.pk,
        key.prefix,
        key.key_hash,
        frozenset(key.allowed_models),
        key.max_tokens_cap,
        _seconds(key.expires_at),
        quota,
        revoked_at=revoked,
        priority=key.effective_priority,
    )
    if not (key.previous_prefix and key.previous_key_hash and key.previous_valid_until):
        return [current]
    grace = key.previous_valid_until.timestamp()
    return [
        current,
        KeyEntry(
            key.pk,
            key.previous_prefix,
            key.previous_key_hash,
            current.allowed_models,
            key.max_tokens_cap,
            current.expires_at,
            quota,
            grace_until=grace,
            revoked_at=revoked,
            priority=current.priority,
        ),
    ]


def load_snapshot() -> Snapshot:
    """Every key's secrets (a revoked key's too, to be refused as revoked) and every deployment's route, or its
    state and why (with the route a held request is planned with, for one put aside), read from the database
    now."""
    snap = Snapshot()
    live_first = (F("revoked_at").asc(nulls_first=True), "pk")
    for key in ApiKey.objects.select_related("owner__member").order_by(*live_first):
        for entry in key_entries(key):
            snap.keys.setdefault(entry.prefix, entry)  # a current prefix wins over an old one's
    failed_wakes = DeploymentEvent.objects.filter(deployment=OuterRef("pk"), kind=DeploymentEvent.Kind.WAKE_FAILED)
    last = failed_wakes.order_by("-at", "-pk")
    deployments = Deployment.objects.prefetch_related("replicas").annotate(
        failed_wake_at=Subquery(last.values("at")[:1]), failed_wake_why=Subquery(last.values("reason")[:1])
    )
    for dep in deployments:
        snap.states[dep.served_model_name] = dep.state
        ready = sorted((r for r in dep.replicas.all() if r.up), key=lambda r: r.pk)
        if dep.state == DeploymentState.READY and ready:
            upstreams = tuple(Upstream(r.pk, r.base_url, r.engine_api_key, r.external) for r in ready)
            created = int(min(r.ready_at for r in ready if r.ready_at).timestamp())
            snap.routes[dep.served_model_name] = Route(
                dep.served_model_name,
                upstreams,
                dep.max_model_len,
                created,
                all(_speaks(dep, r, anthropic=True) for r in ready),
                dep.max_tokens_cap,
                speaks_responses=all(_speaks(dep, r, anthropic=False) for r in ready),
                fit_max_tokens=dep.fit_max_tokens,
                deployment_id=dep.pk,
                priority_scheduling=not dep.external and schedules_by_priority(dep.extra_args, dep.engine),
                max_num_seqs=0 if dep.external else dep.stored_plan.max_num_seqs,
            )
            continue
        snap.reasons[dep.served_model_name] = dep.state_reason
        if (dep.asleep_or_saving or dep.relaunch_due) and not dep.external:
            snap.asleep[dep.served_model_name] = Route(
                dep.served_model_name,
                (),
                dep.max_model_len,
                int(dep.created_at.timestamp()),
                speaks_anthropic(dep.engine, dep.extra_args),
                dep.max_tokens_cap,
                speaks_responses=speaks_responses(dep.engine, dep.extra_args),
                fit_max_tokens=dep.fit_max_tokens,
                deployment_id=dep.pk,
                asleep=True,
            )
            if (at := getattr(dep, "failed_wake_at", None)) is not None:
                snap.not_woken[dep.served_model_name] = (at.timestamp(), getattr(dep, "failed_wake_why", "") or "")
    return snap


def authenticate(snapshot: Snapshot, key: str, now: float | None = None) -> KeyEntry:
    """The entry of ``key`` when it authenticates at ``now`` (Unix seconds, default the clock): a live key's
    current secret, or its previous one within the rotation's grace. The hash comparison is constant-time
    (console.access.key_format.matches). Raises GatewayError 401: an unknown or wrong key, a revoked one, an
    expired one, or a previous secret past its grace (the last three say so: only the key's holder can have
    sent it)."""
    entry = snapshot.keys.get(key_prefix(key))
    if entry is None or not matches(key, entry.key_hash):
        raise errors.invalid_key()
    if entry.revoked_at is not None:
        raise errors.revoked_key(_utc(entry.revoked_at))
    now = time.time() if now is None else now
    if entry.expires_at is not None and entry.expires_at <= now:
        raise errors.expired_key(_utc(entry.expires_at))
    if entry.grace_until is not None and entry.grace_until <= now:
        raise errors.rotated_key(_utc(entry.grace_until))
    return entry


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _speaks(dep: Deployment, replica: Replica, anthropic: bool) -> bool:
    """Whether ``replica`` serves /v1/messages (``anthropic``) or /v1/responses itself: a launched one as its
    deployment's engine does (engines.launch), an external endpoint as its kind and version do (engines.external).
    A route relays an API as it is only when every replica of it serves it; otherwise it translates for all."""
    if replica.external:
        check = external.speaks_anthropic if anthropic else external.speaks_responses
        return check(replica.engine_kind, replica.engine_version)
    return (speaks_anthropic if anthropic else speaks_responses)(dep.engine, dep.extra_args)
