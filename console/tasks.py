"""Celery tasks: the only code that starts, watches and stops engines, and scrapes their metrics.

Each task takes an id, re-reads the row and does nothing when the row is gone or already moved on;
state changes are claimed with conditional updates (Deployment.move). A deployment runs
``replica_count`` replicas: it is ready when all have answered /health, stays ready while at least one
serves, and fails when one dies while loading or the last one dies while serving.
"""

import json
import logging
import time
from pathlib import Path

import httpx
import redis
from celery import shared_task
from django.conf import settings
from django.utils import timezone

from appliance.runtimes import RuntimeError_, get_runtime
from console.lifecycle import LOG_LINES, end_all, end_replica, start_replica
from console.models import Deployment, DeploymentState, ModelSource, Replica
from console.services import bump_routing_version, held_gpus
from engines.metrics import parse_metrics

log = logging.getLogger(__name__)
S = DeploymentState
WATCH_EVERY = 2.0  # seconds between health polls of a loading replica
METRICS_KEEP = 720  # scrapes kept per replica (1 h at the default 5 s interval)


def metrics_key(replica_id: int) -> str:
    return f"hearth:metrics:{replica_id}"


@shared_task
def launch_deployment(deployment_id: int) -> None:
    """pending → starting → loading: start the replicas, then hand each over to watch_replica."""
    dep = Deployment.objects.filter(pk=deployment_id).select_related("model").first()
    if dep is None or not dep.move(S.STARTING, "Starting the engine."):
        return
    if dep.model.kind == ModelSource.Kind.LOCAL and not Path(dep.model.path).is_dir():
        dep.move(S.FAILED, f"The model folder {dep.model.path} is gone; add the model again.")
        return
    held = held_gpus(exclude=dep.pk)
    if taken := [f"GPU {i} ({held[i]})" for i in dep.plan.get("gpu_indices") or [] if i in held]:
        dep.move(S.FAILED, f"Its GPUs are held by other deployments: {', '.join(taken)}. Stop those, or create "
                 "this deployment again to plan it on the free GPUs.")  # fmt: skip
        return
    started = []
    try:
        for _ in range(dep.replica_count):
            started.append(start_replica(dep))
    except RuntimeError_ as exc:
        end_all(dep)
        dep.move(S.FAILED, str(exc))
        return
    log.info("deployment %s: started %s", dep.name, ", ".join(r.runtime_name for r in started))
    if dep.move(S.LOADING, "Loading weights."):
        for replica in started:
            watch_replica.apply_async((replica.pk,), countdown=WATCH_EVERY)


@shared_task
def watch_replica(replica_id: int) -> None:
    """A loading replica: ready when /health answers 200 (the deployment when all are); failed when it
    exits or the start times out (then the deployment fails and its other replicas stop)."""
    replica = Replica.objects.filter(pk=replica_id, running=True).select_related("deployment").first()
    if replica is None or replica.deployment.state != S.LOADING:
        return
    dep = replica.deployment
    status = get_runtime(replica.runtime).status(replica.runtime_name)
    if not status.running:
        reason = end_replica(replica, status, "while loading")
        end_all(dep)
        dep.move(S.FAILED, reason)
        return
    try:
        healthy = httpx.get(f"{replica.base_url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        healthy = False
    elapsed = (timezone.now() - replica.started_at).total_seconds()
    if healthy:
        Replica.objects.filter(pk=replica.pk).update(ready_at=timezone.now())
        waiting = dep.replicas.filter(running=True, ready_at__isnull=True).count()
        if waiting == 0 and dep.move(S.READY, "Serving."):
            bump_routing_version()
        elif waiting:
            dep.move(S.LOADING, f"{dep.replica_count - waiting} of {dep.replica_count} replicas ready.")
        return
    if elapsed > settings.HEARTH_START_TIMEOUT:
        end_all(dep)
        dep.move(S.FAILED, f"No healthy answer within HEARTH_START_TIMEOUT ({settings.HEARTH_START_TIMEOUT} s).")
        return
    dep.move(S.LOADING, f"Loading weights ({elapsed:.0f} s so far).")
    watch_replica.apply_async((replica_id,), countdown=WATCH_EVERY)


@shared_task
def stop_deployment(deployment_id: int) -> None:
    """stopping → stopped: end every running replica of the deployment and keep its last log lines."""
    dep = Deployment.objects.filter(pk=deployment_id).first()
    if dep is None or dep.state != S.STOPPING:
        return
    end_all(dep)
    dep.move(S.STOPPED, "Stopped by the admin.")


@shared_task
def reconcile() -> None:
    """Notice replicas of ready deployments that died: keep their logs, route around them, and fail the
    deployment when none is left."""
    for replica in Replica.objects.filter(running=True, deployment__state=S.READY).select_related("deployment"):
        status = get_runtime(replica.runtime).status(replica.runtime_name)
        if status.running:
            continue
        reason = end_replica(replica, status, "while serving")
        dep = replica.deployment
        serving = dep.replicas.filter(running=True).count()
        if serving == 0:
            dep.move(S.FAILED, reason)
        else:
            Deployment.objects.filter(pk=dep.pk).update(
                state_reason=f"{serving} of {dep.replica_count} replicas serving; {replica.runtime_name}: {reason}"
            )
        bump_routing_version()


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
            scrape = parse_metrics(resp.text, "vllm", time.time())
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("scrape of replica %s failed: %s", replica.pk, exc)
            continue
        key = metrics_key(replica.pk)
        r.lpush(key, json.dumps({"time": scrape.time, "values": scrape.values}))
        r.ltrim(key, 0, METRICS_KEEP - 1)
