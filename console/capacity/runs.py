"""Starting, running and cancelling a capacity check.

``start_check`` validates and queues a run (one active run per deployment; a confirmation when the
deployment served other traffic lately); the worker's ``run_check`` creates a dedicated API key limited
to the deployment, calibrates prompt lengths on its tokenizer, runs each level through the gateway
(console.capacity.loadgen) while it watches for a cancel, stores each level's results with the
engine's own numbers over it (console.capacity.engine_numbers), writes the run against the plan in
words, and revokes the key whatever happens.
"""

import asyncio
import logging
import math
import time
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from console.access.keys import create_key, revoke_key
from console.access.models import ApiKey, Priority
from console.capacity import engine_numbers, loadgen
from console.capacity.lost_tasks import LOST_WORDS, STALE_AFTER, lost
from console.capacity.models import CapacityResult, CapacityRun, RunState, Tuning
from console.deployments import dispatch
from console.deployments.changes import current_settings
from console.deployments.models import Deployment, DeploymentState
from console.errors import ConsoleError
from console.observability import pricing
from console.observability.models import RequestLog
from console.observability.service_level import check_slo, out_of_range, set_targets
from engines.capacity.profiles import CONCURRENCY, MODES, PROFILES, RATE, Shape, shape_for
from engines.capacity.results import LevelResult, Slo, held_against_plan, summarize
from engines.sizing import kv_block_tokens

log = logging.getLogger(__name__)
CHECK = "console.capacity.tasks.run_check"  # the task's name (tasks.py), sent through dispatch
LIVE_WINDOW = timedelta(minutes=10)
MAX_LEVELS = 8
MAX_USERS = 1024
WATCH_EVERY_S = 0.5  # how often the run looks for a cancel and writes its progress
STALE_WORDS = "Its worker stopped answering (restarted or crashed)."


class LiveTraffic(ConsoleError):
    """The deployment served other clients lately; the check needs a confirmation to load it."""


def live_traffic(dep: Deployment) -> str:
    """Requests other than capacity checks' to ``dep`` in the last LIVE_WINDOW, in words; "" for none."""
    check_keys = CapacityRun.objects.exclude(api_key=None).values("api_key")
    recent = RequestLog.objects.filter(model=dep.served_model_name, created_at__gte=timezone.now() - LIVE_WINDOW)
    recent = recent.exclude(api_key__in=check_keys)
    count = recent.count()
    if not count:
        return ""
    keys = recent.exclude(api_key=None).values("api_key").distinct().count()
    requests, from_keys = f"{count:,} request{'s' if count != 1 else ''}", f"{keys:,} key{'s' if keys != 1 else ''}"
    return f"{requests} from {from_keys} in the last 10 minutes"


def _levels(mode: str, levels: list[float]) -> list[float]:
    if mode not in MODES:
        raise ConsoleError(f"Mode must be one of {', '.join(MODES)}.")
    if not 1 <= len(levels) <= MAX_LEVELS:
        raise ConsoleError(f"Give 1 to {MAX_LEVELS} levels of load.")
    if mode == CONCURRENCY and not all(float(v).is_integer() and 1 <= v <= MAX_USERS for v in levels):
        raise ConsoleError(f"Concurrency levels are whole numbers of users from 1 to {MAX_USERS:,}.")
    if mode == RATE and not all(0.01 <= v <= 1000 for v in levels):
        raise ConsoleError("Request rates are from 0.01 to 1,000 requests per second.")
    return [float(v) for v in levels]


def _bounds(levels: list[float], requests_per_level: int, max_seconds: int) -> None:
    most = settings.HEARTH_CAPACITY_MAX_REQUESTS
    if not 1 <= requests_per_level or requests_per_level * len(levels) > most:
        asked = f"{requests_per_level:,} × {len(levels)} levels"
        raise ConsoleError(f"At most {most:,} requests per check in all ({asked}).")
    longest = settings.HEARTH_CAPACITY_MAX_SECONDS
    if not 10 <= max_seconds <= longest:
        raise ConsoleError(f"A check runs 10 to {longest:,} seconds.")


def provenance(dep: Deployment) -> dict[str, Any]:
    """What runs, as the run keeps it: model and revision, engine, image digest and version, GPUs, the
    settings, the SLO and the plan's capacity figures."""
    plan = dep.stored_plan
    return {
        "model": dep.model.name if dep.model else dep.served_model_name,  # an external deployment has no source
        "model_revision": (dep.model.revision or dep.model.path) if dep.model else "",
        "engine": dep.engine,
        "engine_version": dep.engine_version,
        "engine_image": dep.engine_image,
        "gpus": dep.gpu_model or plan.inventory,
        "gpu_indices": list(plan.gpu_indices),
        "replicas": dep.replica_count,
        "settings": current_settings(dep),
        "slo": _slo_facts(dep),
        "plan": {  # None where the plan has none: a CPU engine's max_num_seqs, all of an external deployment's
            "kv_capacity_tokens": plan.kv_capacity_tokens or None,
            "kv_bytes_per_token": plan.kv_bytes_per_token or None,
            "max_model_len": plan.max_model_len or None,
            "max_num_seqs": plan.max_num_seqs or None,
        },
    }


def _slo_facts(dep: Deployment) -> dict[str, object]:
    """The SLO a check measures at (a target None: not checked), and whether it is the deployment's own."""
    slo, own = check_slo(dep)
    return {"ttft_seconds": slo.ttft_seconds, "itl_seconds": slo.itl_seconds, "set": own}


def _targets(dep: Deployment) -> Slo:
    """The check's targets in seconds, a target the SLO leaves out never missed (infinite)."""
    slo, _ = check_slo(dep)
    unchecked = math.inf
    return Slo(
        unchecked if slo.ttft_seconds is None else slo.ttft_seconds,
        unchecked if slo.itl_seconds is None else slo.itl_seconds,
    )


def validate_check(
    dep: Deployment,
    *,
    profile: str,
    mode: str = CONCURRENCY,
    levels: list[float] | None = None,
    shared_prefix: bool = False,
    requests_per_level: int = 0,
    max_seconds: int = 300,
    prompt_tokens: int = 0,
    output_tokens: int = 0,
) -> dict[str, Any]:
    """A check's settings, filled in and checked: ``levels`` default to the profile's, ``requests_per_level``
    to twice the highest level (at least 10); the shape of its requests within the deployment's
    max_model_len (``prompt_tokens``, ``output_tokens``: fixed lengths instead of the profile's, 0: the
    profile's). Raises ConsoleError for settings Hearth refuses."""
    if profile not in PROFILES:
        raise ConsoleError(f"Profile must be one of {', '.join(PROFILES)}.")
    chosen = _levels(mode, list(levels or PROFILES[profile].levels.get(mode, ())))
    requests_per_level = requests_per_level or max(10, 2 * math.ceil(max(chosen)))
    _bounds(chosen, requests_per_level, max_seconds)
    try:
        most = dep.stored_plan.max_model_len or dep.max_model_len
        if not (0 <= prompt_tokens <= most and 0 <= output_tokens <= most):
            raise ValueError(f"Prompt and answer lengths are 0 (the profile's) to max_model_len, {most:,} tokens.")
        shape = shape_for(PROFILES[profile], most, shared_prefix, prompt_tokens, output_tokens)
    except ValueError as exc:
        raise ConsoleError(str(exc)) from None
    return {
        "profile": profile,
        "mode": mode,
        "levels": chosen,
        "shared_prefix": shared_prefix,
        "requests_per_level": requests_per_level,
        "max_seconds": max_seconds,
        "shape": asdict(shape),
    }


LABEL_MAX = 200  # CapacityRun.label's max_length


def start_check(
    dep: Deployment,
    user: Any,
    *,
    label: str = "",
    confirm_live_traffic: bool = False,
    tuning: Any = None,
    tuning_value: Any = None,
    enqueue: bool = True,
    **check: Any,
) -> CapacityRun:
    """Queue a check of a ready deployment (``check``: validate_check's keywords); the worker runs it
    (``enqueue`` False: the caller runs it, as a tuning does in its own task).

    Raises ConsoleError for bad settings or a label over LABEL_MAX characters, a deployment that is not ready or
    already under a check, and LiveTraffic when it served other clients lately and ``confirm_live_traffic`` is
    not given.
    """
    fields = validate_check(dep, **check)
    if len(label := label.strip()) > LABEL_MAX:
        raise ConsoleError(f"The label is {len(label):,} characters long; at most {LABEL_MAX} are allowed.")
    fail_stale_runs(dep.pk)
    if dep.state != DeploymentState.READY:
        raise ConsoleError(f"{dep.name} is {dep.state}; a capacity check needs it ready.")
    if not confirm_live_traffic and (live := live_traffic(dep)):
        raise LiveTraffic(
            f"{dep.name} is serving live traffic ({live}); a check will slow it down. Confirm to go ahead."
        )
    fields |= {
        "deployment": dep,
        "deployment_name": dep.name,
        "created_by": user,
        "label": label,
        "provenance": provenance(dep),
        "tuning": tuning,
        "tuning_value": tuning_value,
    }
    try:
        with transaction.atomic():
            run = CapacityRun.objects.create(**fields)
            if enqueue:
                dispatch.send_after_commit(CHECK, run.pk)
    except IntegrityError:
        active = CapacityRun.objects.filter(deployment=dep, state__in=["queued", "running", "cancelling"]).first()
        raise ConsoleError(
            f"A capacity check is already running on {dep.name} (run {active.pk if active else '?'}); one at a time."
        ) from None
    return run


def _stale(runs: QuerySet[CapacityRun]) -> QuerySet[CapacityRun]:
    """Those of ``runs`` running or cancelling whose worker gave no heartbeat for STALE_AFTER."""
    active = runs.filter(state__in=[RunState.RUNNING, RunState.CANCELLING])
    return active.filter(heartbeat_at__lt=timezone.now() - STALE_AFTER)


def fail_stale_runs(deployment_id: int) -> None:
    """Runs of the deployment whose worker stopped answering (no heartbeat for STALE_AFTER), or whose task was lost
    before they started (lost_tasks.lost), end as failed, so they no longer hold the deployment's one check."""
    _fail(CapacityRun.objects.filter(deployment_id=deployment_id))


def current(run: CapacityRun) -> CapacityRun:
    """``run`` as it stands, for its page and the API: failed if it is stale or lost (fail_stale_runs)."""
    if _fail(CapacityRun.objects.filter(pk=run.pk)):
        run.refresh_from_db()
    return run


def _fail(rows: QuerySet[CapacityRun]) -> int:
    """Fail those of ``rows`` that are stale or lost, saying which; how many."""
    now = timezone.now()
    failed = _stale(rows).update(state=RunState.FAILED, state_reason=STALE_WORDS, finished_at=now)
    alone = rows.filter(tuning__isnull=True)  # a tuning runs its own checks in its task
    return failed + lost(alone).update(state=RunState.FAILED, state_reason=LOST_WORDS, finished_at=now)


def cancel_check(run: CapacityRun) -> None:
    """Ask the run to stop: its worker stops sending, cuts what is in flight and keeps the levels done; a
    run still queued, or one whose worker stopped answering, ends at once. Raises ConsoleError when the run has
    already ended."""
    before_start = {"state": RunState.CANCELLED, "state_reason": "Cancelled before it started."}
    if CapacityRun.objects.filter(pk=run.pk, state=RunState.QUEUED).update(**before_start, finished_at=timezone.now()):
        run.refresh_from_db()
        return
    orphaned = {"state": RunState.CANCELLED, "state_reason": f"Cancelled. {STALE_WORDS}"}
    if _stale(CapacityRun.objects.filter(pk=run.pk)).update(**orphaned, finished_at=timezone.now()):
        run.refresh_from_db()
        return
    if not run.move(RunState.CANCELLING, "Cancelling: the requests in flight are being cut."):
        raise ConsoleError(f"Run {run.pk} has already ended ({run.state}).")


def run_check(run_id: int) -> None:
    """The worker's part: run the check, store its results, revoke its key. Does nothing for a run that
    is gone or not queued; a run cancelled before it started ends as cancelled."""
    run = CapacityRun.objects.select_related("deployment__model").filter(pk=run_id).first()
    if run is None or run.state not in (RunState.QUEUED, RunState.CANCELLING):
        return
    if run.state == RunState.CANCELLING:
        run.move(RunState.CANCELLED, "Cancelled before it started.", finished_at=timezone.now())
        return
    dep = run.deployment
    if dep is None or dep.state != DeploymentState.READY:
        run.move(RunState.FAILED, "The deployment is no longer ready.", finished_at=timezone.now())
        return
    now = timezone.now()
    if not run.move(RunState.RUNNING, started_at=now, heartbeat_at=now, progress_text="Calibrating prompt lengths…"):
        return
    row, secret = create_key(f"capacity check {run.pk}", run.created_by, allowed_models=[dep.served_model_name])
    # interactive, whoever asked: the gateway's lanes never hold its load, so the check measures the engine's queue
    ApiKey.objects.filter(pk=row.pk).update(priority=Priority.INTERACTIVE)
    CapacityRun.objects.filter(pk=run.pk).update(api_key=row)
    try:
        slo = _targets(dep)
        levels = asyncio.run(_measure(run, dep, secret, slo))
        revoke_key(row)  # before the run ends: whoever sees it ended finds its key revoked
        _finish(run, dep, levels, slo)
    except Exception as exc:
        log.exception("capacity run %s failed", run.pk)
        revoke_key(row)
        run.move(RunState.FAILED, f"The check stopped: {exc}", finished_at=timezone.now())
    finally:
        revoke_key(row)  # whatever stopped it, a worker's shutdown included (a revoked key is left as it is)


def _finish(run: CapacityRun, dep: Deployment, levels: list[LevelResult], slo: Slo) -> None:
    shape = Shape(**run.shape)
    measured = [lv for lv in levels if lv.mean_prompt_tokens is not None]
    session = (measured[0].mean_prompt_tokens or 0) + (measured[0].mean_output_tokens or 0) if measured else 0
    capacity = dep.stored_plan.kv_capacity_tokens * dep.replica_count
    unit = "requests/s" if run.mode == RATE else "sessions"
    held = capacity and levels
    block = kv_block_tokens(dep.engine)
    summary = held_against_plan(capacity, session or shape.session_tokens, levels, slo, unit, block) if held else ""
    done = len(levels)
    now = timezone.now()
    if run.move(
        RunState.DONE,
        progress=1.0,
        progress_text=f"{done} of {len(run.levels)} levels",
        summary=summary,
        finished_at=now,
    ):
        pricing.record_capacity(dep, levels, slo, run.pk)
        return
    why = (
        f"Cancelled after {done} of {len(run.levels)} levels; those are kept, the one under way is not."
        if done
        else "Cancelled during the first level, before any level was done: nothing is kept."
    )
    run.move(RunState.CANCELLED, why, summary=summary, finished_at=now)


async def _measure(run: CapacityRun, dep: Deployment, secret: str, slo: Slo) -> list[LevelResult]:
    """Calibrate, then run each level, goodput at ``slo``; a cancel stops it between or inside levels. Returns the
    levels done."""
    target = loadgen.Target(settings.HEARTH_GATEWAY_URL, secret, dep.served_model_name)
    stop, sent = asyncio.Event(), [0]
    total = run.requests_per_level * len(run.levels)
    words = {"text": "Calibrated the prompt lengths; starting the first level…"}
    deadline = time.monotonic() + run.max_seconds
    results: list[LevelResult] = []
    async with loadgen.session(target) as http:
        per_word, overhead = await loadgen.calibrate(http, target)
        load = loadgen.Load(target, Shape(**run.shape), f"run-{run.pk}", per_word, overhead)
        watcher = asyncio.create_task(_watch(run.pk, stop, lambda: (min(1.0, sent[0] / total), words["text"])))
        try:
            for number, level in enumerate(run.levels):
                seconds = (deadline - time.monotonic()) / (len(run.levels) - number)
                plan = loadgen.Level(level, run.requests_per_level, seconds, number * run.requests_per_level)
                before = sent[0]
                started = time.time()

                def count(n: int, base: int = before, at: str = _progress_head(run, number)) -> None:
                    sent[0] = base + n
                    words["text"] = f"{at}: {n:,} of {run.requests_per_level:,} requests answered"

                samples, duration = await load.run(http, plan, run.mode, stop, count)
                if stop.is_set():
                    break
                sent[0] = before + run.requests_per_level
                result = summarize(level, samples, duration, slo)
                result.engine = await sync_to_async(engine_numbers.over)(dep, started, time.time())
                await sync_to_async(_save)(run, result)
                results.append(result)
        finally:
            watcher.cancel()
    return results


def _progress_head(run: CapacityRun, number: int) -> str:
    unit = "requests/s" if run.mode == RATE else "users"
    return f"Level {number + 1} of {len(run.levels)} ({run.levels[number]:g} {unit})"


async def _watch(run_id: int, stop: asyncio.Event, progress: Any) -> None:
    """Every WATCH_EVERY_S: write the progress (a 0–1 fraction and words); set ``stop`` once the run is
    being cancelled."""
    while True:
        state = await sync_to_async(_progress)(run_id, *progress())
        if state != RunState.RUNNING:
            stop.set()
            return
        await asyncio.sleep(WATCH_EVERY_S)


def _progress(run_id: int, fraction: float, text: str) -> str:
    """The run's progress and heartbeat, its tuning's heartbeat too (console.capacity.tuning); returns its state."""
    now = timezone.now()
    CapacityRun.objects.filter(pk=run_id, state=RunState.RUNNING).update(
        progress=fraction, progress_text=text, heartbeat_at=now
    )
    Tuning.objects.filter(runs__pk=run_id).update(heartbeat_at=now)
    return str(CapacityRun.objects.values_list("state", flat=True).get(pk=run_id))


def _save(run: CapacityRun, result: LevelResult) -> None:
    CapacityResult.objects.create(run=run, **asdict(result))


def set_slo(dep: Deployment, ttft_seconds: float | None, itl_seconds: float | None) -> None:
    """Set the deployment's SLO (seconds, None: not checked; console.observability.service_level), which goodput
    is measured at, here and on its panels. Raises ConsoleError out of range."""
    if why := out_of_range(ttft_seconds, itl_seconds):
        raise ConsoleError(why)
    set_targets(dep, ttft_seconds, itl_seconds)
