"""The deployments' JSON API answers (console.deployments.api serves them): a deployment with its replicas, plan,
remedy, SLO, idle settings, sleep and wake history and what its state does not show (caveats); and the idle
fields a create or a change takes."""

from datetime import datetime

from django.core.exceptions import ObjectDoesNotExist
from ninja import Field, Schema
from pydantic import StrictBool

from appliance import celery_heartbeats
from console.api_bodies import Integer
from console.deployments import remedy_actions
from console.deployments.models import Deployment, DeploymentEvent, DeploymentState, Replica
from console.deployments.state_caveats import Caveat, caveats
from console.weights import progress as weights_progress
from engines.oom_remedy import Change

HISTORY = 50  # events a deployment's answer carries, the newest first


class IdleCreate(Schema):
    """The idle settings of a new deployment (console.deployments.idle_settings): 400 with why when its engine
    cannot have them."""

    idle_policy: str = "stay"
    idle_minutes: Integer = 30
    sleep_level: Integer = 1
    always_on: StrictBool = False


class IdleChange(Schema):
    """Idle settings to change; one left out keeps its value. They act at once, without a relaunch."""

    idle_policy: str | None = None
    idle_minutes: Integer | None = None
    sleep_level: Integer | None = None
    always_on: StrictBool | None = None


class EventOut(Schema):
    kind: str
    at: datetime
    seconds: float | None
    level: int | None
    reason: str


def history(dep: Deployment) -> list[DeploymentEvent]:
    """Its HISTORY newest sleeps, wakes, stops to save, failed wakes and engine crashes."""
    return dep.recent_events(HISTORY)


class ReplicaOut(Schema):
    id: int
    runtime_name: str
    running: bool
    ready: bool
    external: bool = Field(description="An endpoint Hearth did not launch (never started or stopped by it).")
    base_url: str = Field(description="An external endpoint's base URL; '' for a replica Hearth launched.")
    engine_kind: str
    engine_version: str = Field(
        description="An external endpoint's, as it reports it; '' for a replica Hearth "
        "launched (the deployment's engine_version)."
    )
    started_at: datetime
    stopped_at: datetime | None = Field(description="When it ended for good; null while it runs or restarts.")
    down_reason: str = Field(description="Why an external endpoint's last health check failed; '' while it is up.")
    checked_at: datetime | None = Field(
        description="An external endpoint's last health check; null for a replica Hearth launched (its scrapes say "
        "it is up: the deployment's panel)."
    )
    exit_code: int | None
    oom_killed: bool
    restarts: int
    restart_at: datetime | None
    log_tail: str
    previous_log_tail: str
    previous_exit_code: int | None
    previous_oom_killed: bool

    @staticmethod
    def resolve_ready(obj: Replica) -> bool:
        return obj.up

    @staticmethod
    def resolve_base_url(obj: Replica) -> str:
        return obj.url


class ChangeOut(Schema):
    name: str
    before: str
    after: str
    why: str


class SloOut(Schema):
    """The deployment's SLO, as ``POST /api/deployments/{id}/slo`` sets it (console.observability.service_level)."""

    ttft_seconds: float | None = Field(description="The TTFT target, seconds; null: not checked or none set.")
    itl_seconds: float | None = Field(description="The ITL target, seconds; null: not checked or none set.")
    default: bool = Field(
        description="None is set: the panels show no goodput and a capacity check measures at "
        "the default, console.observability.service_level.CHECK_DEFAULT."
    )


class CaveatOut(Schema):
    kind: str = Field(description="no-worker, queued, monitoring-stopped or liveness-unknown.")
    words: str


class WeightsDownloadOut(Schema):
    repo: str
    file: str = Field(description="The file under way.")
    done_bytes: int
    total_bytes: int
    fraction: float = Field(description="0–1.")
    rate_bytes_per_s: int = Field(description="Bytes per second received by this try (0 before the first byte).")
    eta_seconds: int | None = Field(description="Seconds left at that rate; null while unknown.")
    retrying: str = Field(description='Why it waits before its next try (a backoff after a failure); "" while it runs.')
    words: str


class DeploymentOut(Schema):
    id: int
    name: str
    external: bool = Field(description="Made only of engines Hearth did not launch.")
    replica_count: int
    engine: str
    served_model_name: str
    state: str
    state_reason: str
    state_since: datetime
    desired: str = Field(description="serving, asleep, stopped_idle (stopped to save) or stopped.")
    idle_policy: str
    idle_minutes: int
    sleep_level: int
    always_on: bool
    wake_started_at: datetime | None = Field(description="When the wake under way began; null when none is.")
    events: list[EventOut] = Field(
        description="Its newest sleeps, wakes, stops to save, failed wakes and engine crashes (kind 'crash')."
    )
    plan: dict[str, object]
    extra_args: list[str]
    engine_env: dict[str, str]
    fit_max_tokens: bool
    max_tokens_cap: int | None = Field(description="Tokens a request may generate here; null: no cap.")
    tool_call_parser: str
    reasoning_parser: str
    engine_version: str
    engine_image: str
    gpu_model: str
    replicas: list[ReplicaOut] = Field(
        description="Every replica it ran, oldest first: a relaunch adds new ones, "
        "and those that ended (stopped_at) keep their last log lines and exit code."
    )
    remedy: list[ChangeOut] | None
    slo: SloOut
    weights_download: WeightsDownloadOut | None = Field(
        description="The download of its weights under way before its engine starts (console.weights); null when "
        "none is."
    )
    caveats: list[CaveatOut] = Field(
        description="What its state does not show: no worker taking its stop, launch, sleep or wake, or Celery "
        "beat stopped so it is not checked (console.deployments.state_caveats); empty while both run."
    )

    @staticmethod
    def resolve_caveats(obj: Deployment) -> list[Caveat]:
        return caveats(obj, celery_heartbeats.read())

    @staticmethod
    def resolve_weights_download(obj: Deployment) -> dict[str, object] | None:
        return weights_progress.read(obj.pk) if obj.state == DeploymentState.PULLING else None

    @staticmethod
    def resolve_plan(obj: Deployment) -> dict[str, object]:
        return obj.stored_plan.to_json()

    @staticmethod
    def resolve_replicas(obj: Deployment) -> list[Replica]:
        return list(obj.replicas.order_by("pk"))

    @staticmethod
    def resolve_events(obj: Deployment) -> list[DeploymentEvent]:
        return history(obj)

    @staticmethod
    def resolve_remedy(obj: Deployment) -> list[Change] | None:
        known = remedy_actions.remedy_for(obj)
        return known.changes if known else None

    @staticmethod
    def resolve_slo(obj: Deployment) -> SloOut:
        """Read through the reverse one-to-one (this layer may not import console.observability): no query when
        the caller selected it (``select_related("slo")``), one otherwise."""
        try:
            row = obj.slo
        except ObjectDoesNotExist:
            return SloOut(ttft_seconds=None, itl_seconds=None, default=True)
        return SloOut(ttft_seconds=row.ttft_seconds, itl_seconds=row.itl_seconds, default=False)
