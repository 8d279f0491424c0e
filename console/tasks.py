"""Celery tasks: the only code that starts, watches and stops engines, and scrapes their metrics.

Each task takes an id, re-reads the row and does nothing when the row is gone or already moved on;
state changes are claimed with conditional updates (Deployment.move).
"""

import dataclasses
import json
import logging
import secrets
import socket
import sys
import time
from pathlib import Path

import httpx
import redis
from celery import shared_task
from django.conf import settings
from django.utils import timezone

from appliance.runtimes import RuntimeError_, RuntimeStatus, get_runtime
from console.models import Deployment, DeploymentState, ModelSource, Replica
from console.services import bump_routing_version
from engines.launch import EngineKind, LaunchSpec
from engines.logscan import scan
from engines.metrics import parse_metrics
from engines.planner import GpuPlan
from engines.sizing import SizingPlan
from engines.vllm import build_simulator_spec, build_vllm_cpu_spec

SIZING_FIELDS = {f.name for f in dataclasses.fields(SizingPlan)}

log = logging.getLogger(__name__)
S = DeploymentState
WATCH_EVERY = 2.0  # seconds between health polls of a loading replica
METRICS_KEEP = 720  # scrapes kept per replica (1 h at the default 5 s interval)
LOG_LINES = 60  # kept on the replica and shown in the console
SCAN_LINES = 2000  # read for the root cause of a failure
SIGKILL_CODES = {-9, 137}
OOM_HINT = "It ran out of memory: lower the KV space or max_model_len, or give the engine more memory."


def metrics_key(replica_id: int) -> str:
    return f"hearth:metrics:{replica_id}"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@shared_task
def launch_deployment(deployment_id: int) -> None:
    """pending → starting → loading: start one replica, then hand over to watch_replica."""
    dep = Deployment.objects.filter(pk=deployment_id).select_related("model").first()
    if dep is None or not dep.move(S.STARTING, "Starting the engine."):
        return
    if dep.model.kind == ModelSource.Kind.LOCAL and not Path(dep.model.path).is_dir():
        dep.move(S.FAILED, f"The model folder {dep.model.path} is gone; add the model again.")
        return
    runtime = get_runtime()
    host = settings.HEARTH_ENGINE_HOST
    replica = Replica.objects.create(
        deployment=dep,
        runtime=runtime.name,
        host=host,
        port=_free_port(host),
        engine_api_key=secrets.token_urlsafe(24),
    )
    replica.runtime_name = f"hearth-replica-{replica.pk}"
    spec = launch_spec(dep, replica)
    try:
        replica.handle = runtime.start(replica.runtime_name, spec)
    except RuntimeError_ as exc:
        replica.save()
        dep.move(S.FAILED, str(exc))
        return
    replica.running = True
    replica.save()
    log.info("deployment %s: started replica %s (%s)", dep.name, replica.runtime_name, replica.handle)
    if dep.move(S.LOADING, "Loading weights."):
        watch_replica.apply_async((replica.pk,), countdown=WATCH_EVERY)


def launch_spec(dep: Deployment, replica: Replica) -> LaunchSpec:
    """The engine's launch spec from the deployment's stored plan."""
    common = {
        "served_model_name": dep.served_model_name,
        "host": replica.host,
        "port": replica.port,
        "api_key": replica.engine_api_key,
        "user_args": dep.extra_args,
    }
    if dep.engine == EngineKind.SIMULATOR:
        fields = {f.name for f in dataclasses.fields(GpuPlan)}
        plan = GpuPlan(**{k: v for k, v in dep.plan.items() if k in fields} | {"split": None})
        return build_simulator_spec(
            python=sys.executable, code_dir=str(settings.BASE_DIR), model_path=dep.model.path or dep.model.repo_id,
            plan=plan, **common,
        )  # fmt: skip
    return build_vllm_cpu_spec(
        python=settings.HEARTH_VLLM_CPU_PYTHON,
        model_path=Path(dep.model.path),
        plan=SizingPlan(**{k: v for k, v in dep.plan.items() if k in SIZING_FIELDS}),
        kv_space_gib=dep.kv_space_gib,
        cache_dir=settings.HEARTH_CACHE_DIR,
        **common,
    )


@shared_task
def watch_replica(replica_id: int) -> None:
    """loading → ready when /health answers 200; → failed when the engine exits or the start times out."""
    replica = Replica.objects.filter(pk=replica_id).select_related("deployment").first()
    if replica is None or replica.deployment.state != S.LOADING:
        return
    dep = replica.deployment
    status = get_runtime(replica.runtime).status(replica.runtime_name)
    if not status.running:
        dep.move(S.FAILED, _ended(replica, status, "while loading"))
        return
    try:
        healthy = httpx.get(f"{replica.base_url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        healthy = False
    if healthy:
        replica.ready_at = timezone.now()
        replica.save(update_fields=["ready_at"])
        if dep.move(S.READY, "Serving."):
            bump_routing_version()
        return
    elapsed = (timezone.now() - replica.started_at).total_seconds()
    if elapsed > settings.HEARTH_START_TIMEOUT:
        _ended(replica, RuntimeStatus(running=True), "")
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
    for replica in dep.replicas.filter(running=True):
        _ended(replica, RuntimeStatus(running=True), "")
    dep.move(S.STOPPED, "Stopped by the admin.")


def _ended(replica: Replica, status: RuntimeStatus, when: str) -> str:
    """Stop what is left of the replica (an engine's children can outlive it), keep its last log lines
    and exit state, and say why it ended: its exit code and the root cause found in its log."""
    runtime = get_runtime(replica.runtime)
    final = runtime.stop(replica.runtime_name)
    log = runtime.logs(replica.runtime_name, SCAN_LINES)
    found = scan(log)
    replica.log_tail = "".join(log.splitlines(keepends=True)[-LOG_LINES:])
    replica.running = False
    replica.exit_code = status.exit_code if status.exit_code is not None else final.exit_code
    replica.oom_killed = status.oom_killed or final.oom_killed or found.oom
    replica.stopped_at = timezone.now()
    replica.save()
    code = "an unknown code" if replica.exit_code is None else f"code {replica.exit_code}"
    reason = f"The engine exited {when} with {code}" + (f": {found.cause}" if found.cause else ".")
    if replica.oom_killed:
        reason += " " + OOM_HINT
    elif replica.exit_code in SIGKILL_CODES:
        reason += (
            " It was killed (SIGKILL): by an admin, or by the kernel's OOM killer when the host ran out of memory."
        )
    return reason


@shared_task
def reconcile() -> None:
    """Mark ready deployments whose engine has died as failed, keeping the engine's last log lines."""
    for replica in Replica.objects.filter(running=True, deployment__state=S.READY).select_related("deployment"):
        status = get_runtime(replica.runtime).status(replica.runtime_name)
        if not status.running and replica.deployment.move(S.FAILED, _ended(replica, status, "while serving")):
            bump_routing_version()


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
