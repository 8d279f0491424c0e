"""Celery tasks: the only code that starts, watches and stops engines, and scrapes their metrics.

Each task takes an id, re-reads the row and does nothing when the row is gone or already moved on;
state changes are claimed with conditional updates (Deployment.move), and a launch's progress updates
are its heartbeat: reconcile resumes one that has been silent for HEARTH_STALE_AFTER seconds (its
worker died), adopting the engines it had started. A deployment runs ``replica_count`` replicas: it is
ready when all have answered /health, stays ready while at least one serves, fails when one dies
before it ever served, and restarts one that crashed after serving, with backoff.
"""

import json
import logging
import time
from datetime import timedelta
from pathlib import Path

import httpx
import redis
from celery import shared_task
from django.conf import settings
from django.utils import timezone

from appliance.runtimes import RuntimeError_, RuntimeStatus, get_runtime
from console.changes import replan_on_free_gpus
from console.lifecycle import LOG_LINES, converge, end_all, end_replica, image_ref, note_crash, prepare, start_replica
from console.models import Deployment, DeploymentState, ModelSource, Replica
from console.services import bump_routing_version, launch
from engines.adapters import VERSION_PATHS, version_from_engine
from engines.launch import GPU_ENGINES, EngineKind
from engines.metrics import parse_metrics

log = logging.getLogger(__name__)
S = DeploymentState
WATCH_EVERY = 2.0  # seconds between health polls of a loading replica
METRICS_KEEP = 720  # scrapes kept per replica (1 h at the default 5 s interval)
STABLE_AFTER = 600.0  # seconds a restarted replica must serve before its crash count starts again


def metrics_key(replica_id: int) -> str:
    return f"hearth:metrics:{replica_id}"


@shared_task
def launch_deployment(deployment_id: int) -> None:
    """pending → pulling → starting → loading: make the image present, start the replicas, then hand
    each over to watch_replica."""
    dep = Deployment.objects.filter(pk=deployment_id).select_related("model").first()
    if dep is None or dep.state != S.PENDING:
        return
    if dep.model.kind == ModelSource.Kind.LOCAL and not Path(dep.model.path).is_dir():
        dep.move(S.FAILED, f"The model folder {dep.model.path} is gone; add the model again.")
        return
    if refused := replan_on_free_gpus(dep):
        dep.move(S.FAILED, refused)
        return
    if dep.move(S.PULLING, "Preparing the engine image."):
        _pull(dep)


def _pull(dep: Deployment) -> None:
    """pulling → starting, the pull's progress written every second (it is also the launch's heartbeat)."""
    last = [0.0]

    def progress(words: str) -> None:
        if time.monotonic() - last[0] >= 1.0:
            last[0] = time.monotonic()
            dep.progress(words)

    try:
        pinned = prepare(dep, progress)
    except RuntimeError_ as exc:
        dep.move(S.FAILED, str(exc))
        return
    indices = ", ".join(str(i) for i in dep.plan.get("gpu_indices") or [])
    gpus = f"GPU {indices} of {dep.plan.get('inventory', '')}" if dep.engine in GPU_ENGINES else "CPU"
    pin = {"engine_image": pinned, "engine_image_ref": image_ref(dep) if pinned else ""}
    if dep.move(S.STARTING, "Starting the engine.", gpu_model=gpus[:100], **pin):
        _start(dep)


def _start(dep: Deployment) -> None:
    """starting → loading: start or adopt every replica (a second run after a worker died starts none twice)."""
    try:
        replicas = converge(dep)
    except RuntimeError_ as exc:
        end_all(dep)
        dep.move(S.FAILED, str(exc))
        return
    log.info("deployment %s: started %s", dep.name, ", ".join(r.runtime_name for r in replicas))
    if dep.move(S.LOADING, "Loading weights."):
        for replica in replicas:
            watch_replica.apply_async((replica.pk,), countdown=WATCH_EVERY)


@shared_task
def resume_launch(deployment_id: int) -> None:
    """Carry on a launch whose worker died (reconcile claimed it): pulling or starting, from where it was."""
    dep = Deployment.objects.filter(pk=deployment_id).select_related("model").first()
    if dep is not None and dep.state == S.PULLING:
        _pull(dep)
    elif dep is not None and dep.state == S.STARTING:
        _start(dep)


@shared_task
def watch_replica(replica_id: int) -> None:
    """A loading replica: ready when /health answers 200 (the deployment when all are); when its engine
    exits, the deployment fails on a first launch, and the replica restarts with backoff after a crash."""
    replica = Replica.objects.filter(pk=replica_id, running=True, ready_at__isnull=True).first()
    if replica is None or replica.deployment.state not in (S.LOADING, S.READY):
        return
    dep = replica.deployment
    status = get_runtime(replica.runtime).status(replica.runtime_name)
    if not status.running:
        _engine_ended(replica, status)
        return
    try:
        healthy = httpx.get(f"{replica.base_url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        healthy = False
    elapsed = (timezone.now() - replica.started_at).total_seconds()
    if healthy:
        Replica.objects.filter(pk=replica.pk).update(ready_at=timezone.now())
        waiting = dep.replicas.filter(stopped_at__isnull=True, ready_at__isnull=True).count()
        version = _engine_version(replica, dep.engine) or dep.engine_version
        if waiting == 0 and dep.move(S.READY, "Serving.", engine_version=version):
            bump_routing_version()
        elif dep.state == S.READY:  # a restarted replica of a deployment that kept serving is back
            if waiting == 0:
                dep.progress("Serving.")
            bump_routing_version()
        elif waiting:
            dep.progress(f"{dep.replica_count - waiting} of {dep.replica_count} replicas ready.")
        return
    if elapsed > settings.HEARTH_START_TIMEOUT:
        end_all(dep)
        dep.move(S.FAILED, f"No healthy answer within HEARTH_START_TIMEOUT ({settings.HEARTH_START_TIMEOUT} s).")
        return
    if dep.state == S.LOADING:
        dep.progress(f"Loading weights ({elapsed:.0f} s so far).")
    watch_replica.apply_async((replica_id,), countdown=WATCH_EVERY)


def _engine_version(replica: Replica, engine: str) -> str:
    """The version the running engine reports (engines.adapters.VERSION_PATHS), "" when it says none."""
    headers = {"Authorization": f"Bearer {replica.engine_api_key}"}  # SGLang guards its info with the key
    for path in VERSION_PATHS["sglang" if engine == EngineKind.SGLANG else "vllm"]:
        try:
            resp = httpx.get(f"{replica.base_url}{path}", headers=headers, timeout=2)
            if resp.status_code == 200:
                return version_from_engine(engine, resp.json())[:50]
        except (httpx.HTTPError, ValueError):
            continue
    return ""


def _engine_ended(replica: Replica, status: RuntimeStatus) -> None:
    """A replica's engine is gone. Never served yet: the launch failed. Served before: restart it after
    a backoff that doubles with each crash in a row, up to HEARTH_MAX_RESTARTS; then the deployment fails.
    Claimed first: of two workers that notice the same exit, one handles it."""
    if not Replica.objects.filter(pk=replica.pk, running=True, started_at=replica.started_at).update(running=False):
        return
    dep = replica.deployment
    if replica.restarts == 0 and replica.ready_at is None:
        reason = end_replica(replica, status, "while loading")
        end_all(dep)
        dep.move(S.FAILED, reason)
        return
    if replica.ready_at and (timezone.now() - replica.ready_at).total_seconds() > STABLE_AFTER:
        replica.restarts = 0  # it served long enough: this crash starts a new count
    if replica.restarts >= settings.HEARTH_MAX_RESTARTS:
        reason = end_replica(replica, status, "while serving")
        end_all(dep)
        dep.move(S.FAILED, f"{reason} It crashed {replica.restarts + 1} times in a row; Hearth stopped restarting it.")
        bump_routing_version()
        return
    delay = settings.HEARTH_RESTART_BACKOFF * 2**replica.restarts
    reason = note_crash(replica, status, delay)
    restart_replica.apply_async((replica.pk,), countdown=delay)  # reconcile restarts it if this task is lost
    what = f"{replica.runtime_name}: {reason} Restarting in {delay:.0f} s (restart {replica.restarts})."
    serving = dep.replicas.filter(running=True, ready_at__isnull=False).count()
    if serving == 0:
        if dep.state == S.LOADING:
            dep.progress(what)
        else:
            dep.move(S.LOADING, what)
    else:
        Deployment.objects.filter(pk=dep.pk).update(state_reason=f"{serving} of {dep.replica_count} serving. {what}")
    bump_routing_version()


@shared_task
def stop_deployment(deployment_id: int) -> None:
    """stopping → stopped: end every replica of the deployment and keep its last log lines."""
    dep = Deployment.objects.filter(pk=deployment_id).first()
    if dep is None or dep.state != S.STOPPING:
        return
    end_all(dep)
    dep.move(S.STOPPED, "Stopped by the admin.")


@shared_task
def recreate_deployment(deployment_id: int) -> None:
    """stopping → stopped → pending: stop the old replicas first (they hold the GPUs), then launch the
    deployment with the settings console.changes stored."""
    dep = Deployment.objects.filter(pk=deployment_id).first()
    if dep is None or dep.state != S.STOPPING:
        return
    end_all(dep)
    bump_routing_version()
    if dep.move(S.STOPPED, "Stopped to recreate with the new settings."):
        launch(dep)


@shared_task
def reconcile() -> None:
    """Compare what should run with what runs: resume launches whose worker died, notice serving engines
    that exited, restart crashed replicas when their backoff is over, and remove engines no replica
    owns (a database restored from backup, a container left by hand)."""
    stale = timezone.now() - timedelta(seconds=settings.HEARTH_STALE_AFTER)
    for dep in Deployment.objects.filter(state__in=[S.PULLING, S.STARTING, S.LOADING], updated_at__lt=stale):
        if not Deployment.objects.filter(pk=dep.pk, state=dep.state, updated_at=dep.updated_at).update(
            updated_at=timezone.now()
        ):
            continue  # another worker claimed it
        log.warning(
            "deployment %s: no sign of its %s task for %s s; resuming", dep.name, dep.state, settings.HEARTH_STALE_AFTER
        )
        if dep.state == S.LOADING:
            for replica in dep.replicas.filter(running=True, ready_at__isnull=True):
                watch_replica.delay(replica.pk)
        else:
            resume_launch.delay(dep.pk)
    for replica in Replica.objects.filter(running=True, ready_at__isnull=False, deployment__state=S.READY):
        status = get_runtime(replica.runtime).status(replica.runtime_name)
        if not status.running:
            _engine_ended(replica, status)
    due = Replica.objects.filter(running=False, stopped_at__isnull=True, restart_at__lte=timezone.now())
    for replica_id in due.values_list("pk", flat=True):
        restart_replica(replica_id)
    _remove_orphans()


@shared_task
def restart_replica(replica_id: int) -> None:
    """Start a crashed replica again once its backoff is over (claimed: a replica restarts once)."""
    now = timezone.now()
    replica = Replica.objects.filter(pk=replica_id, running=False, stopped_at__isnull=True).first()
    if replica is None or replica.restart_at is None or replica.restart_at > now + timedelta(seconds=1):
        return
    if replica.deployment.state not in (S.LOADING, S.READY):
        return
    if not Replica.objects.filter(pk=replica.pk, restart_at=replica.restart_at).update(restart_at=None):
        return
    dep = replica.deployment
    slot = list(dep.replicas.filter(stopped_at__isnull=True).order_by("pk")).index(replica)
    try:
        start_replica(replica, slot)
    except RuntimeError_ as exc:
        end_all(dep)
        dep.move(S.FAILED, f"Restarting {replica.runtime_name} failed: {exc}")
        bump_routing_version()
        return
    watch_replica.apply_async((replica.pk,), countdown=WATCH_EVERY)


def _remove_orphans() -> None:
    runtime = get_runtime()
    owned = set(Replica.objects.filter(stopped_at__isnull=True).values_list("runtime_name", flat=True))
    for name in runtime.names() - owned:
        log.warning("removing engine %s: no replica owns it", name)
        runtime.stop(name)


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


@shared_task
def scrape_metrics() -> None:
    """Scrape every ready replica's /metrics into Redis (newest first), and refresh its log tail."""
    r = _redis()
    for replica in Replica.objects.filter(running=True, deployment__state__in=[S.LOADING, S.READY]).select_related(
        "deployment"
    ):
        runtime = get_runtime(replica.runtime)
        replica.log_tail = runtime.logs(replica.runtime_name, LOG_LINES)
        replica.save(update_fields=["log_tail"])
        if replica.deployment.state != S.READY:
            continue
        try:
            resp = httpx.get(f"{replica.base_url}/metrics", timeout=3)
            resp.raise_for_status()
            mapping = "sglang" if replica.deployment.engine == EngineKind.SGLANG else "vllm"
            scrape = parse_metrics(resp.text, mapping, time.time())
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("scrape of replica %s failed: %s", replica.pk, exc)
            continue
        key = metrics_key(replica.pk)
        r.lpush(key, json.dumps({"time": scrape.time, "values": scrape.values}))
        r.ltrim(key, 0, METRICS_KEEP - 1)
