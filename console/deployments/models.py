"""Deployments and their replicas: what should run, what runs, and the states between.

Deployment states (transitions written once, in TRANSITIONS)::

    pending ──► pulling ──► starting ──► loading ◄──► ready
       │           │           │            │          │
       └───────────┴───────────┴─► failed ◄─┴──────────┤
                                                       ▼
    (any active) ──────────────────────────────────► stopping ──► stopped
    failed / stopped ──► pending (launch again)

ready → loading when its only serving replica crashed and is restarting.

Sharing the GPUs over time (issue 29; console.deployments.sleeping)::

    ready ──► sleeping ──► asleep ──► waking ──► ready
      ▲          │  │         │  │        │ │
      └──────────┘  │         │  │        │ │     sleeping → ready: the sleep called off (a request came in)
                    ▼         ▼  │        ▼ │
                  failed ◄────┴──┼──── failed
                                 ▼          ▼
                             stopping ◄─────┘   (an admin's stop, or make down; sleeping too)

A stop to save (idle policy "stop") is the plain ready → stopping → stopped with ``desired`` "stopped_idle"; its
wake is the plain launch, stopped → pending → … → ready. ``make down`` ends every engine and keeps what was wanted
(an asleep one becomes stopped to save): one stopped while ``desired`` is still "serving" is launched again by the
worker at its start and at each reconcile, or by the first request for it (``relaunch_due``,
console.deployments.restoring); an admin's stop sets ``desired`` "stopped", so it stays down. ``desired`` is what
the admin or the idle policy wants (DesiredState); ``state`` is what runs, ``state_since`` since when. A wake under
way (either kind) has ``wake_started_at``; the move to ready or failed that ends it clears it and records its
DeploymentEvent.

A deployment may also hold engines Hearth did not launch (engines.external): an external deployment (engine
"external") is only those, registered ready and removed by deleting it, never launched or stopped; a launched
deployment may add some beside its own replicas (a mixed deployment). Their replicas (runtime "external") are
health-checked by reconcile (console.deployments.external): up while ``ready_at`` is set, down with
``down_reason`` otherwise, never started, stopped or restarted.
"""

from typing import Any, NamedTuple

from django.db import models, transaction
from django.utils import timezone

from console.catalog.models import ModelSource
from console.errors import ConsoleError
from console.sealed import SealedCharField
from engines.external import EXTERNAL_ENGINE, EXTERNAL_RUNTIME, ExternalKind
from engines.launch import EngineKind
from engines.sleep_support import IdlePolicy
from engines.stored_plan import StoredPlan


class DeploymentState(models.TextChoices):
    PENDING = "pending"
    PULLING = "pulling"
    STARTING = "starting"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    STOPPING = "stopping"
    STOPPED = "stopped"
    SLEEPING = "sleeping"  # going to sleep: unrouted, its engine's /sleep under way
    ASLEEP = "asleep"  # its engine sleeps (holding little GPU memory); a request wakes it
    WAKING = "waking"  # its engine's /wake_up under way


class DesiredState(models.TextChoices):
    """What the admin or the idle policy wants of a deployment (``Deployment.desired``)."""

    SERVING = "serving"
    ASLEEP = "asleep"
    STOPPED_IDLE = "stopped_idle", "stopped to save"  # by its idle policy: a request launches it again
    STOPPED = "stopped"  # by an admin (or never launched)


S = DeploymentState
ASLEEP_STATES = (S.SLEEPING, S.ASLEEP, S.WAKING)  # an engine runs, and holds its GPUs, but serves nothing
ACTIVE_STATES = (S.PENDING, S.PULLING, S.STARTING, S.LOADING, S.READY, *ASLEEP_STATES)
TRANSITIONS: dict[str, tuple[str, ...]] = {
    S.PENDING: (S.PULLING, S.FAILED, S.STOPPING),
    S.PULLING: (S.STARTING, S.FAILED, S.STOPPING),
    S.STARTING: (S.LOADING, S.FAILED, S.STOPPING),
    S.LOADING: (S.READY, S.FAILED, S.STOPPING),
    S.READY: (S.LOADING, S.FAILED, S.STOPPING, S.SLEEPING),
    S.SLEEPING: (S.ASLEEP, S.READY, S.FAILED, S.STOPPING),
    S.ASLEEP: (S.WAKING, S.FAILED, S.STOPPING),
    S.WAKING: (S.READY, S.FAILED, S.STOPPING),
    S.FAILED: (S.PENDING,),
    S.STOPPING: (S.STOPPED,),
    S.STOPPED: (S.PENDING,),
}


def sources_of(target: str) -> list[str]:
    """The states from which ``target`` may be entered."""
    return [state for state, targets in TRANSITIONS.items() if target in targets]


class EventNote(NamedTuple):
    """A DeploymentEvent to record with a move (Deployment.move): its kind (DeploymentEvent.Kind), seconds, sleep
    level and reason."""

    kind: str
    seconds: float | None
    level: int | None = None
    reason: str = ""


class Deployment(models.Model):
    """A model served by one engine: its plan, its state, and the name clients ask for."""

    name = models.CharField(max_length=100, unique=True, help_text="Default served model name.")
    model = models.ForeignKey(
        ModelSource,
        on_delete=models.PROTECT,
        related_name="deployments",
        null=True,
        blank=True,
        help_text="None for an external deployment (engines Hearth did not launch).",
    )
    engine = models.CharField(max_length=20)
    served_model_name = models.CharField(max_length=200, unique=True)
    max_model_len = models.PositiveIntegerField(help_text="Tokens; 0 = the model's own maximum.")
    kv_space_gib = models.FloatField(help_text="KV cache budget in GiB (vLLM CPU).")
    extra_args = models.JSONField(default=list, blank=True, help_text="Engine flags the admin added.")
    engine_env = models.JSONField(default=dict, blank=True, help_text="Environment added to the engine's.")
    replica_count = models.PositiveSmallIntegerField(default=1, help_text="Engines serving this model at once.")
    max_tokens_cap = models.PositiveIntegerField(
        null=True, blank=True, help_text="Tokens a request may generate here, whatever it asks; None: no cap."
    )
    fit_max_tokens = models.BooleanField(
        default=True,
        help_text="Lower an output limit over the context left to what it leaves, instead of a 400 "
        "(on for a deployment made since migration 0011; one made before keeps its setting).",
    )
    tool_call_parser = models.CharField(
        max_length=50, blank=True, help_text="Override of the plan's tool-call parser; 'none' turns it off."
    )
    reasoning_parser = models.CharField(
        max_length=50, blank=True, help_text="Override of the plan's reasoning parser; 'none' turns it off."
    )
    plan = models.JSONField(
        help_text="The plan it was created or last changed with, as engines.stored_plan's JSON; read it as stored_plan."
    )
    state = models.CharField(max_length=10, choices=DeploymentState.choices, default=S.PENDING)
    state_reason = models.TextField(blank=True)
    engine_version = models.CharField(max_length=50, blank=True, help_text="As the running engine reports it.")
    engine_image = models.CharField(max_length=300, blank=True, help_text="The image pinned by digest at launch.")
    engine_image_ref = models.CharField(
        max_length=300, blank=True, help_text="The configured image the pin came from; its tag names the version."
    )
    gpu_model = models.CharField(max_length=100, blank=True, help_text="The GPUs it was launched on.")
    idle_policy = models.CharField(
        max_length=5,
        choices=[(p.value, p.value) for p in IdlePolicy],
        default=IdlePolicy.STAY.value,
        help_text="What idle_minutes without a request bring (engines.sleep_support).",
    )
    idle_minutes = models.PositiveIntegerField(default=30, help_text="Minutes without a request before the policy.")
    sleep_level = models.PositiveSmallIntegerField(default=1, help_text="1: weights kept in host RAM; 2: dropped.")
    always_on = models.BooleanField(default=False, help_text="Never put to sleep or stopped to make room.")
    desired = models.CharField(max_length=12, choices=DesiredState.choices, default=DesiredState.STOPPED)
    state_since = models.DateTimeField(default=timezone.now, help_text="When it entered its state.")
    wake_started_at = models.DateTimeField(null=True, blank=True, help_text="When the wake under way began.")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.name

    @property
    def stored_plan(self) -> StoredPlan:
        """The plan, typed: the one way to read ``plan`` (write StoredPlan.to_json() to it). Raises
        PlanVersionError for a plan stored by a newer Hearth."""
        return StoredPlan.from_json(self.plan, self.engine)

    @property
    def never_launched(self) -> bool:
        """Created and not launched yet: stopped, with no reason given and no replica ever made (a stop
        always gives its reason)."""
        return self.state == S.STOPPED and not self.state_reason and not self.replicas.exists()

    @property
    def source(self) -> ModelSource:
        """The model a launched deployment runs. Raises ConsoleError for an external deployment (it has none:
        Hearth knows only the name its engines serve)."""
        if self.model is None:
            raise ConsoleError(f"{self.name} is served by engines Hearth did not launch; it has no model source.")
        return self.model

    @property
    def external(self) -> bool:
        """Made only of engines Hearth did not launch (registered, never launched or stopped)."""
        return self.engine == EXTERNAL_ENGINE

    @property
    def exportable(self) -> bool:
        """Whether a cluster export can be made of it (console.deployments.cluster_export, which says why not):
        Hearth launched it, from a model with a pinned source, not a demo catalog entry."""
        return not self.external and self.model is not None and self.model.kind != ModelSource.Kind.DEMO

    @property
    def engine_label(self) -> str:
        """The engine as the pages name it: the launch form's words for its kind ("vLLM (CPU)"; the stored kind for
        one this version does not know), or for an external deployment its endpoints' kinds in words ("vLLM (not
        launched by Hearth)")."""
        if not self.external:
            return EngineKind(self.engine).label if self.engine in EngineKind else self.engine
        kinds = sorted({ExternalKind(r.engine_kind).label for r in self.replicas.external()})
        return ", ".join(kinds) + " (not launched by Hearth)"

    @property
    def state_words(self) -> str:
        """The state as the console shows it: "not launched yet" rather than "stopped" for a new deployment,
        "stopped to save" for one its idle policy stopped."""
        if self.state == S.STOPPED and self.desired == DesiredState.STOPPED_IDLE:
            return "stopped to save"
        return "not launched yet" if self.never_launched else str(self.state)

    def recent_events(self, count: int) -> list["DeploymentEvent"]:
        """Its ``count`` newest sleeps, wakes, stops to save and failed wakes, the newest first."""
        return list(self.events.order_by("-at", "-pk")[:count])

    @property
    def stopped_to_save(self) -> bool:
        """Stopped by its idle policy: the next request launches it again (console.deployments.sleeping)."""
        return self.state == S.STOPPED and self.desired == DesiredState.STOPPED_IDLE

    @property
    def asleep_or_saving(self) -> bool:
        """Put aside to share the GPUs: sleeping, asleep or waking, or stopped (stopping) to save; a request for it
        waits for a wake (console.deployments.wakeups) instead of being refused."""
        stopped_to_save = self.desired == DesiredState.STOPPED_IDLE and self.state in (S.STOPPING, S.STOPPED)
        return self.state in ASLEEP_STATES or stopped_to_save or self.wake_started_at is not None

    @property
    def relaunch_due(self) -> bool:
        """Stopped while the admin wants it serving (its engines ended with the appliance, ``make down``, or by a
        stop to recreate it): the worker launches it again (console.deployments.restoring), and a request for it
        meanwhile waits for that launch as for a wake (gateway.holding)."""
        launched = self.model_id is not None and not self.external  # one Hearth launches (it has a model)
        return launched and self.state == S.STOPPED and self.desired == DesiredState.SERVING

    def move(
        self,
        target: str,
        reason: str = "",
        event: EventNote | None = None,
        wake_level: int | None = None,
        **fields: Any,
    ) -> bool:
        """Claim the transition to ``target`` with a conditional UPDATE; False if another got there first.

        Only states that TRANSITIONS allows into ``target`` are matched, so two workers never both win. The move to
        ready or failed ends a wake under way (as this object read ``wake_started_at``): its DeploymentEvent, a wake
        with its seconds or a failed wake with ``reason`` (and ``wake_level``, the sleep level it woke from; None for
        a launch again after a stop), is recorded; a move to stopping ends it without one.
        ``event`` (a kind, its seconds, its level) is recorded with the move. The move and its event are one
        transaction: no reader sees the new state without its event.
        """
        now = timezone.now()
        woke_from = self.wake_started_at
        if target in (S.READY, S.FAILED, S.STOPPING):
            fields.setdefault("wake_started_at", None)
        with transaction.atomic():
            updated = Deployment.objects.filter(pk=self.pk, state__in=sources_of(target)).update(
                state=target, state_reason=reason, updated_at=now, state_since=now, **fields
            )
            if not updated:
                return False
            if woke_from is not None and target in (S.READY, S.FAILED):
                kind = DeploymentEvent.Kind.WAKE if target == S.READY else DeploymentEvent.Kind.WAKE_FAILED
                DeploymentEvent.note(self, kind, (now - woke_from).total_seconds(), level=wake_level, reason=reason)
            if event is not None:
                DeploymentEvent.note(self, event.kind, event.seconds, level=event.level, reason=event.reason)
        self.state, self.state_reason, self.state_since = target, reason, now
        for key, value in fields.items():
            setattr(self, key, value)
        return True

    def progress(self, reason: str) -> bool:
        """Say how the current state is going (it is also the task's heartbeat, ``updated_at``), only
        while the state is still the one this object read; False when it has moved on."""
        updated = Deployment.objects.filter(pk=self.pk, state=self.state).update(
            state_reason=reason, updated_at=timezone.now()
        )
        if updated:
            self.state_reason = reason
        return bool(updated)


class DeploymentEvent(models.Model):
    """One sleep, wake, stop to save or failed wake of a deployment (console.deployments.sleeping): when it ended
    (``at``), how long it took (``seconds``), at which sleep level, and why, in words."""

    class Kind(models.TextChoices):
        SLEEP = "sleep"
        WAKE = "wake"
        STOP_IDLE = "stop_idle", "stopped to save"
        WAKE_FAILED = "wake_failed", "wake failed"
        CRASH = "crash", "engine crashed"  # a serving replica's engine ended by itself (console.deployments.watching)

    KEPT = 500  # events kept per deployment, the newest

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    at = models.DateTimeField(default=timezone.now)
    seconds = models.FloatField(null=True, blank=True, help_text="How long it took.")
    level = models.PositiveSmallIntegerField(null=True, blank=True, help_text="The sleep level, for a sleep.")
    reason = models.TextField(blank=True)

    class Meta:
        indexes = (models.Index(fields=["deployment", "-at"]),)

    def __str__(self) -> str:
        return f"{self.get_kind_display()} at {self.at:%Y-%m-%d %H:%M:%S}"

    @classmethod
    def note(
        cls, dep: Deployment, kind: str, seconds: float | None, level: int | None = None, reason: str = ""
    ) -> "DeploymentEvent":
        """Record one event of ``dep`` now, keeping its KEPT newest."""
        event = cls.objects.create(deployment=dep, kind=kind, seconds=seconds, level=level, reason=reason)
        old = cls.objects.filter(deployment=dep).order_by("-at", "-pk").values_list("pk", flat=True)[cls.KEPT :]
        cls.objects.filter(pk__in=list(old)).delete()
        return event


class ReplicaQuerySet(models.QuerySet["Replica"]):
    def launched(self) -> "ReplicaQuerySet":
        """The replicas Hearth starts and stops (a process or a container)."""
        return self.exclude(runtime=EXTERNAL_RUNTIME)

    def external(self) -> "ReplicaQuerySet":
        """The endpoints Hearth did not launch."""
        return self.filter(runtime=EXTERNAL_RUNTIME)


class Replica(models.Model):
    """One engine process or container of a deployment, or an endpoint Hearth did not launch (runtime
    "external": ``url`` its base URL, ``engine_kind`` and ``engine_version`` its engine, ``engine_api_key`` the
    key it demands, if any; ``host`` and ``port`` read from the URL, for display)."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="replicas")
    runtime = models.CharField(max_length=10)
    runtime_name = models.CharField(max_length=100, blank=True, help_text="Process or container name.")
    handle = models.CharField(max_length=100, blank=True, help_text="pid or container id.")
    host = models.CharField(max_length=100)
    port = models.PositiveIntegerField()
    engine_api_key = SealedCharField(
        max_length=600,
        blank=True,
        help_text="Per-launch secret, or an external endpoint's key; only the gateway "
        "uses it. Sealed (600 holds a key of up to 300 characters).",
    )
    url = models.CharField(max_length=500, blank=True, help_text="An external endpoint's base URL.")
    engine_kind = models.CharField(max_length=20, blank=True, help_text="An external endpoint's engine.")
    engine_version = models.CharField(max_length=50, blank=True, help_text="As an external endpoint reports it.")
    down_reason = models.TextField(blank=True, help_text="Why an external endpoint's last health check failed.")
    checked_at = models.DateTimeField(null=True, blank=True, help_text="An external endpoint's last health check.")
    running = models.BooleanField(default=False)
    sleep_mode = models.BooleanField(default=False, help_text="Its engine was started able to sleep (its routes on).")
    exit_code = models.IntegerField(null=True, blank=True)
    oom_killed = models.BooleanField(default=False)
    log_tail = models.TextField(blank=True)
    restarts = models.PositiveIntegerField(default=0, help_text="Crashes in a row it was restarted after.")
    restart_at = models.DateTimeField(null=True, blank=True, help_text="When a crashed replica starts again.")
    previous_log_tail = models.TextField(blank=True, help_text="The last lines of the run before a restart.")
    previous_exit_code = models.IntegerField(null=True, blank=True)
    previous_oom_killed = models.BooleanField(default=False)
    started_at = models.DateTimeField(default=timezone.now)
    ready_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    objects = ReplicaQuerySet.as_manager()

    def __str__(self) -> str:
        return self.runtime_name

    @property
    def external(self) -> bool:
        return self.runtime == EXTERNAL_RUNTIME

    @property
    def base_url(self) -> str:
        """Where the engine answers: an external endpoint's URL, else ``http://host:port``."""
        return self.url if self.external else f"http://{self.host}:{self.port}"

    @property
    def up(self) -> bool:
        """Serving: running (registered, for an external endpoint) and healthy since its start or last check."""
        return self.running and self.ready_at is not None
