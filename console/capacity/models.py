"""Capacity runs, their results per level of load, and tuning sessions of one knob.

Run states (transitions written once, in RUN_TRANSITIONS)::

    queued ──► running ──► done
       │          │  └───► failed   (also a run whose worker stopped answering: STALE_AFTER)
       │          ▼
       │      cancelling ──► cancelled
       └────────────────────► cancelled (before it started)

One run at a time per deployment: a partial unique constraint over the active states.
"""

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from console.access.models import ApiKey
from console.deployments.models import Deployment


class RunState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    DONE = "done"
    FAILED = "failed"


R = RunState
ACTIVE_RUN_STATES = (R.QUEUED, R.RUNNING, R.CANCELLING)
RUN_TRANSITIONS: dict[str, tuple[str, ...]] = {
    R.QUEUED: (R.RUNNING, R.CANCELLING, R.CANCELLED, R.FAILED),
    R.RUNNING: (R.DONE, R.FAILED, R.CANCELLING),
    R.CANCELLING: (R.CANCELLED, R.FAILED),
    R.CANCELLED: (),
    R.DONE: (),
    R.FAILED: (),
}


class CapacityRun(models.Model):
    """One capacity check of a deployment: what was asked (profile, mode, levels, bounds), what ran
    (``provenance``: model revision, engine image digest and version, GPUs, settings, SLO, plan), how it
    goes (state, progress 0–1), and the run against the plan in words. Results are CapacityResult rows."""

    deployment = models.ForeignKey(Deployment, null=True, on_delete=models.SET_NULL, related_name="capacity_runs")
    deployment_name = models.CharField(max_length=100, help_text="Kept when the deployment is deleted.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    label = models.CharField(max_length=200, blank=True, help_text="What this run is for, e.g. 'FP8 KV'.")
    profile = models.CharField(max_length=20)
    mode = models.CharField(max_length=20, help_text="concurrency (users) or rate (requests/s).")
    levels = models.JSONField(help_text="Users, or requests/s, per level, in the order run.")
    shared_prefix = models.BooleanField(default=False)
    requests_per_level = models.PositiveIntegerField()
    max_seconds = models.PositiveIntegerField(help_text="The whole run's bound, seconds.")
    shape = models.JSONField(default=dict, help_text="prompt_tokens, output_tokens, prefix_tokens per request.")
    provenance = models.JSONField(default=dict, help_text="What ran: model revision, image, version, GPUs, settings.")
    state = models.CharField(max_length=12, choices=RunState.choices, default=R.QUEUED)
    state_reason = models.TextField(blank=True)
    progress = models.FloatField(default=0.0, help_text="0–1.")
    progress_text = models.CharField(max_length=300, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="Last sign of life of its worker.")
    api_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    summary = models.TextField(blank=True, help_text="The run held against the plan, in words.")
    tuning = models.ForeignKey("Tuning", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    tuning_value = models.JSONField(null=True, blank=True, help_text="The knob's value this run measured.")

    class Meta:
        constraints = (
            models.UniqueConstraint(
                fields=["deployment"],
                condition=Q(state__in=["queued", "running", "cancelling"]),
                name="one_active_capacity_run_per_deployment",
            ),
        )

    def __str__(self) -> str:
        return f"capacity run {self.pk} of {self.deployment_name}"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_RUN_STATES

    @property
    def levels_text(self) -> str:
        """The levels as a person writes them: "1, 10, 50"."""
        return ", ".join(f"{level:g}" for level in self.levels)

    def move(self, target: str, reason: str = "", **fields: Any) -> bool:
        """Claim the transition to ``target`` with a conditional UPDATE; False if the run is elsewhere."""
        sources = [s for s, targets in RUN_TRANSITIONS.items() if target in targets]
        updated = CapacityRun.objects.filter(pk=self.pk, state__in=sources).update(
            state=target, state_reason=reason, **fields
        )
        if updated:
            self.state, self.state_reason = target, reason
            for key, value in fields.items():
                setattr(self, key, value)
        return bool(updated)


class CapacityResult(models.Model):
    """One level of a run: latencies in seconds, throughputs in tokens/s or requests/s, ratios 0–1
    (engines.capacity.results.LevelResult); ``engine`` the engine's own numbers over the level."""

    run = models.ForeignKey(CapacityRun, on_delete=models.CASCADE, related_name="results")
    level = models.FloatField()
    requests = models.PositiveIntegerField()
    succeeded = models.PositiveIntegerField()
    failures = models.JSONField(default=dict, help_text="Failure kind → count.")
    duration_s = models.FloatField()
    ttft_p50 = models.FloatField(null=True)
    ttft_p90 = models.FloatField(null=True)
    ttft_p99 = models.FloatField(null=True)
    itl_p50 = models.FloatField(null=True)
    itl_p90 = models.FloatField(null=True)
    itl_p99 = models.FloatField(null=True)
    tpot_p50 = models.FloatField(null=True)
    per_user_tokens_per_s = models.FloatField(null=True)
    output_tokens_per_s = models.FloatField()
    prompt_tokens_per_s = models.FloatField()
    goodput_rps = models.FloatField()
    goodput_ratio = models.FloatField()
    cache_hit_ratio = models.FloatField(null=True)
    mean_prompt_tokens = models.FloatField(null=True)
    mean_output_tokens = models.FloatField(null=True)
    engine = models.JSONField(default=dict, help_text="kv_cache_peak, preemptions, running_peak, waiting_peak, ….")

    class Meta:
        ordering = ("run", "id")

    def __str__(self) -> str:
        return f"{self.run_id} @ {self.level:g}"

    @property
    def failed(self) -> int:
        return self.requests - self.succeeded


class Tuning(models.Model):
    """One knob tried at several values: each value applied through the change flow (a Recreate when the
    deployment runs), then the same check run again; ``best`` is the value with the most goodput."""

    KNOBS = (
        "max_num_seqs",
        "max_num_batched_tokens",
        "kv_cache_dtype",
        "enable_prefix_caching",
        "gpu_memory_utilization",
        "kv_space_gib",
    )
    deployment = models.ForeignKey(Deployment, null=True, on_delete=models.SET_NULL, related_name="tunings")
    deployment_name = models.CharField(max_length=100)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    knob = models.CharField(max_length=40)
    values = models.JSONField(help_text="The values to try, in order; the first is the setting before.")
    check_settings = models.JSONField(help_text="The check each value runs: profile, mode, levels, bounds.")
    state = models.CharField(max_length=12, choices=RunState.choices, default=R.QUEUED)
    state_reason = models.TextField(blank=True)
    step = models.PositiveSmallIntegerField(default=0, help_text="Values done so far.")
    downtime_seconds = models.FloatField(null=True, help_text="Expected per relaunch, from the change preview.")
    best_value = models.JSONField(null=True, blank=True)
    applied = models.BooleanField(default=False, help_text="The best value was applied at the end.")
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="Last sign of life of its worker.")

    def __str__(self) -> str:
        return f"tuning {self.pk} of {self.knob} on {self.deployment_name}"
