"""Tuning one knob at a time: each value applied through the change flow (console.deployments.changes;
a running deployment is recreated, its downtime stated before), the same check run again, the values
compared by goodput at the SLO, and the best one offered to apply.

Knobs: ``max_num_seqs``, ``kv_cache_dtype``, ``gpu_memory_utilization`` (GPU engines) and ``kv_space_gib``
(vLLM CPU) are the change flow's own settings; ``max_num_batched_tokens`` and ``enable_prefix_caching``
are engine flags (``--max-num-batched-tokens N``, ``--[no-]enable-prefix-caching``) kept in the
deployment's extra engine flags. The first value tried is always the setting before, so the comparison
has its baseline.
"""

import logging
import time
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from console.capacity import runs
from console.capacity.lost_tasks import LOST_WORDS, STALE_AFTER, lost
from console.capacity.models import ACTIVE_RUN_STATES, CapacityRun, RunState, Tuning
from console.deployments import dispatch
from console.deployments.changes import apply_change, current_settings, preview_change
from console.deployments.models import Deployment, DeploymentState, DesiredState
from console.errors import ConsoleError

log = logging.getLogger(__name__)
TUNE = "console.capacity.tasks.run_tuning"  # the task's name (tasks.py), sent through dispatch
SETTING_KNOBS = {"max_num_seqs": int, "kv_cache_dtype": str, "gpu_memory_utilization": float, "kv_space_gib": float}
FLAG_KNOBS = {"max_num_batched_tokens": "--max-num-batched-tokens", "enable_prefix_caching": "--enable-prefix-caching"}
DEFAULT = "default"  # a flag knob left to the engine's own default
MAX_VALUES = 6
STALE_WORDS = f"{runs.STALE_WORDS} The values measured before are kept."


def _without_flag(args: list[str], flag: str) -> list[str]:
    """``args`` less ``flag`` (and its value, or its ``--no-`` form for a switch)."""
    out: list[str] = []
    skip = False
    takes_value = flag == FLAG_KNOBS["max_num_batched_tokens"]
    for arg in args:
        if skip:
            skip = False
        elif arg == flag and takes_value:
            skip = True
        elif arg not in (flag, "--no-" + flag[2:]) and not arg.startswith(flag + "="):
            out.append(arg)
    return out


def current_value(dep: Deployment, knob: str) -> Any:
    """The knob's value now: a setting, a flag's value, or DEFAULT when the flag is not given."""
    if knob in SETTING_KNOBS:
        return current_settings(dep)[knob]
    args = list(dep.extra_args)
    if knob == "enable_prefix_caching":
        return False if "--no-enable-prefix-caching" in args else True if "--enable-prefix-caching" in args else DEFAULT
    flag = FLAG_KNOBS[knob]
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            return int(args[index + 1])
        if arg.startswith(flag + "="):
            return int(arg.split("=", 1)[1])
    return DEFAULT


def settings_with(dep: Deployment, knob: str, value: Any) -> dict[str, Any]:
    """The deployment's settings with the knob at ``value``, as apply_change takes them."""
    chosen = current_settings(dep)
    if knob in SETTING_KNOBS:
        return chosen | {knob: value}
    flag = FLAG_KNOBS[knob]
    args = _without_flag(chosen["extra_args"], flag)
    if value != DEFAULT:
        args += [flag, str(value)] if knob == "max_num_batched_tokens" else [flag if value else "--no-" + flag[2:]]
    return chosen | {"extra_args": args}


def parse_values(knob: str, text: str) -> list[Any]:
    """Values from "64, 128" (a number knob), "auto, fp8", or "on, off". Raises ConsoleError."""
    if knob not in SETTING_KNOBS and knob not in FLAG_KNOBS:
        raise ConsoleError(f"Knob must be one of {', '.join([*SETTING_KNOBS, *FLAG_KNOBS])}.")
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    if not 1 <= len(parts) <= MAX_VALUES:
        raise ConsoleError(f"Give 1 to {MAX_VALUES} values, separated by commas.")
    try:
        if knob == "enable_prefix_caching":
            return [{"on": True, "off": False, "true": True, "false": False}[p.lower()] for p in parts]
        kind = SETTING_KNOBS.get(knob, int)
        return [kind(p) for p in parts]
    except (KeyError, ValueError):
        raise ConsoleError(f"{text!r} are not values of {knob} (e.g. 64, 128; auto, fp8; on, off).") from None


def start_tuning(dep: Deployment, user: Any, knob: str, values: list[Any], check: dict[str, Any]) -> Tuning:
    """Queue the tuning of ``knob`` over ``values`` with the check ``check`` (start_check's keywords).
    Each value's plan is previewed first, so one that does not fit is refused before anything changes.
    Raises ConsoleError for a knob, value or check Hearth refuses, or a deployment that is not ready or
    already under a check or tuning."""
    if dep.state != DeploymentState.READY:
        raise ConsoleError(f"{dep.name} is {dep.state}; tuning needs it ready.")
    runs.fail_stale_runs(dep.pk)
    fail_stale_tunings(dep.pk)
    if (
        CapacityRun.objects.filter(deployment=dep, state__in=ACTIVE_RUN_STATES).exists()
        or Tuning.objects.filter(deployment=dep, state__in=ACTIVE_RUN_STATES).exists()
    ):
        raise ConsoleError(f"A capacity check or tuning is already running on {dep.name}; one at a time.")
    before = current_value(dep, knob)
    tried = [before, *[v for v in values if v != before]]
    downtime = None
    for value in tried[1:]:
        preview = preview_change(dep, **settings_with(dep, knob, value))
        if not preview.plan.fits:
            raise ConsoleError(f"{knob} = {value} does not fit: {preview.plan.reasons[-1]}")
        downtime = preview.downtime_seconds
    runs.validate_check(dep, **check)
    with transaction.atomic():
        row = Tuning.objects.create(
            deployment=dep,
            deployment_name=dep.name,
            created_by=user,
            knob=knob,
            values=tried,
            check_settings=check,
            downtime_seconds=downtime,
        )
        dispatch.send_after_commit(TUNE, row.pk)
    return row


def _wait_ready(dep: Deployment, tuning_id: int) -> str:
    """Wait for the relaunch to end, the tuning's heartbeat written each second; "" when ready, else why not. A
    recreate passes through stopped on its way (console.deployments.stopping.recreate): stopped ends the wait only
    when it is wanted stopped."""
    deadline = time.monotonic() + settings.HEARTH_START_TIMEOUT + 120
    while time.monotonic() < deadline:
        Tuning.objects.filter(pk=tuning_id).update(heartbeat_at=timezone.now())
        dep.refresh_from_db()
        if dep.state == DeploymentState.READY:
            return ""
        wanted_stopped = dep.desired in (DesiredState.STOPPED, DesiredState.STOPPED_IDLE)
        if dep.state == DeploymentState.FAILED or (dep.state == DeploymentState.STOPPED and wanted_stopped):
            return f"{dep.name} is {dep.state}: {dep.state_reason}"
        time.sleep(1)
    return f"{dep.name} did not become ready in time."


def run_tuning(tuning_id: int) -> None:
    """The worker's part: for each value from the next step on, apply it (a Recreate), wait for ready,
    run the check in this process; then pick the best. A cancel ends it after the current value."""
    tuning = Tuning.objects.filter(pk=tuning_id, state__in=[RunState.QUEUED, RunState.RUNNING]).first()
    if tuning is None or tuning.deployment is None:
        return
    dep = tuning.deployment
    Tuning.objects.filter(pk=tuning.pk).update(state=RunState.RUNNING, heartbeat_at=timezone.now())
    for step in range(tuning.step, len(tuning.values)):
        value = tuning.values[step]
        try:
            if current_value(dep, tuning.knob) != value:
                apply_change(dep, **settings_with(dep, tuning.knob, value))
            if why := _wait_ready(dep, tuning.pk):
                raise ConsoleError(why)
            run = runs.start_check(
                dep,
                tuning.created_by,
                **tuning.check_settings,
                label=f"{tuning.knob} = {value}",
                confirm_live_traffic=True,
                tuning=tuning,
                tuning_value=value,
                enqueue=False,
            )
            runs.run_check(run.pk)
        except ConsoleError as exc:
            Tuning.objects.filter(pk=tuning.pk).update(state=RunState.FAILED, state_reason=f"At {value}: {exc}")
            return
        Tuning.objects.filter(pk=tuning.pk).update(step=step + 1)
        if Tuning.objects.filter(pk=tuning.pk, state=RunState.CANCELLING).exists():
            reason = f"Cancelled after {value}."
            Tuning.objects.filter(pk=tuning.pk).update(state=RunState.CANCELLED, state_reason=reason)
            return
    best = best_value(tuning)
    Tuning.objects.filter(pk=tuning.pk).update(state=RunState.DONE, best_value=best)


def peak_goodput(run: CapacityRun) -> float:
    """A run's best goodput at the SLO over its levels, requests/s (0 for none)."""
    return max((r.goodput_rps for r in run.results.all()), default=0.0)


def best_value(tuning: Tuning) -> Any:
    """The value whose finished run had the most goodput at the SLO (the earliest on a tie), or None."""
    runs = [r for r in tuning.runs.order_by("pk") if r.state == RunState.DONE]
    best = max(runs, key=peak_goodput, default=None)
    return best.tuning_value if best else None


def apply_best(tuning: Tuning) -> None:
    """Apply the best value through the change flow (a Recreate when it is not what runs now).
    Raises ConsoleError when there is none yet or the deployment is gone."""
    if tuning.state != RunState.DONE or tuning.best_value is None or tuning.deployment is None:
        raise ConsoleError("This tuning has no best value to apply yet.")
    dep = tuning.deployment
    if current_value(dep, tuning.knob) != tuning.best_value:
        apply_change(dep, **settings_with(dep, tuning.knob, tuning.best_value))
    Tuning.objects.filter(pk=tuning.pk).update(applied=True)
    tuning.applied = True


def _stale(rows: QuerySet[Tuning]) -> QuerySet[Tuning]:
    """Those of ``rows`` running or cancelling whose worker gave no heartbeat for STALE_AFTER (one with none
    yet: a tuning from before its heartbeat was kept, that long after its creation)."""
    cutoff = timezone.now() - STALE_AFTER
    active = rows.filter(state__in=[RunState.RUNNING, RunState.CANCELLING])
    return active.filter(Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff))


def fail_stale_tunings(deployment_id: int) -> None:
    """Tunings of the deployment whose worker stopped answering (the values measured are kept), or whose task was
    lost before they started (lost_tasks.lost), end as failed, so they no longer hold its one check or tuning."""
    _fail(Tuning.objects.filter(deployment_id=deployment_id))


def current(row: Tuning) -> Tuning:
    """``row`` as it stands: failed, if its worker stopped answering or its task was lost, for its page and the
    API."""
    if _fail(Tuning.objects.filter(pk=row.pk)):
        row.refresh_from_db()
    return row


def _fail(rows: QuerySet[Tuning]) -> int:
    """Fail those of ``rows`` that are stale or lost, saying which; how many."""
    failed = _stale(rows).update(state=RunState.FAILED, state_reason=STALE_WORDS)
    return failed + lost(rows).update(state=RunState.FAILED, state_reason=LOST_WORDS)


def cancel_tuning(tuning: Tuning) -> None:
    """Stop after the value being measured; its check is cancelled too; one whose worker stopped answering ends
    at once. Raises ConsoleError once ended."""
    orphaned = {"state": RunState.CANCELLED, "state_reason": f"Cancelled. {STALE_WORDS}"}
    if _stale(Tuning.objects.filter(pk=tuning.pk)).update(**orphaned):
        tuning.refresh_from_db()
        return
    if not Tuning.objects.filter(pk=tuning.pk, state__in=[RunState.QUEUED, RunState.RUNNING]).update(
        state=RunState.CANCELLING, state_reason="Cancelling after the value being measured."
    ):
        raise ConsoleError(f"Tuning {tuning.pk} has already ended.")
    for run in tuning.runs.filter(state__in=[RunState.QUEUED, RunState.RUNNING]):
        run.move(RunState.CANCELLING, "Cancelling with its tuning.")
    tuning.refresh_from_db()
