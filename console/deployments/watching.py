"""Replicas after their start: ready when /health answers (the deployment when all are); an engine that exits,
or says in its log that it could not listen on its port (engines.logscan.listen_failure: SGLang then hangs for
minutes, and what answers on that port is another process), fails a first launch (one added to a ready deployment
is ended alone: console.deployments.scaling), and a replica that crashed after serving restarts with a backoff that
doubles with each crash in a row, up to HEARTH_MAX_RESTARTS, on a port chosen again (lifecycle.restart_port). A
deployment stays ready while one replica serves.
"""

import logging
import time
from datetime import timedelta

import httpx
from django.conf import settings
from django.utils import timezone

from appliance.runtimes import RuntimeError_, RuntimeStatus, get_runtime
from console.deployments import dispatch
from console.deployments.launching import LOADING, WATCH_EVERY
from console.deployments.lifecycle import end_all, end_replica, note_crash, restart_port, start_replica
from console.deployments.models import Deployment, DeploymentEvent, DeploymentState, Replica
from console.deployments.scaling import added_replica_failed
from console.fanout import bump_routing_version
from engines.engine_version import VERSION_PATHS, version_from_engine
from engines.external import EXTERNAL_ENGINE
from engines.launch import SGLANG_ENGINES
from engines.logscan import listen_failure

log = logging.getLogger(__name__)
S = DeploymentState
VERSION_TRIES = 3  # reads of a just-ready engine's version, VERSION_PAUSE apart (SGLang's once came back empty)
VERSION_PAUSE = 0.5  # seconds
# Seconds one read of the version may take at ready: SGLang answers /server_info through its scheduler, late on a
# busy CPU (a CI run's three tries, 2 s each, all came back empty); a reconcile's one read per deployment, MEND_WAIT.
VERSION_WAIT = 10.0
MEND_WAIT = 2.0
LISTEN_LINES = 200  # the log's last lines read at each poll for a failure to listen (SGLang logs nothing after it)
STABLE_AFTER = 600.0  # seconds a restarted replica must serve before its crash count starts again


def watch(replica_id: int) -> None:
    """One health poll of a loading replica; polls again in WATCH_EVERY seconds until it answers or ends."""
    replica = Replica.objects.launched().filter(pk=replica_id, running=True, ready_at__isnull=True).first()
    if replica is None or replica.deployment.state not in (S.LOADING, S.READY):
        return
    dep = replica.deployment
    runtime = get_runtime(replica.runtime)
    status = runtime.status(replica.runtime_name)
    if not status.running:
        engine_ended(replica, status)
        return
    if listen_failure(runtime.logs(replica.runtime_name, LISTEN_LINES)):  # SGLang hangs on: ended here (logscan)
        engine_ended(replica, status)
        return
    try:
        healthy = httpx.get(f"{replica.base_url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        healthy = False
    elapsed = (timezone.now() - replica.started_at).total_seconds()
    if healthy:
        _became_ready(replica, dep)
        return
    if elapsed > settings.HEARTH_START_TIMEOUT:
        why = f"No healthy answer within HEARTH_START_TIMEOUT ({settings.HEARTH_START_TIMEOUT} s)."
        if dep.state == S.READY:
            end_replica(replica, status, "")
            if added_replica_failed(replica, why):
                return
        end_all(dep)
        dep.move(S.FAILED, why)
        return
    if dep.state == S.LOADING:
        dep.progress(f"{LOADING} ({elapsed:.0f} s so far).")
    dispatch.send(dispatch.WATCH_REPLICA, replica_id, countdown=WATCH_EVERY)


def _became_ready(replica: Replica, dep: Deployment) -> None:
    Replica.objects.filter(pk=replica.pk).update(ready_at=timezone.now())
    waiting = dep.replicas.launched().filter(stopped_at__isnull=True, ready_at__isnull=True).count()
    version = _engine_version(replica, dep.engine) or dep.engine_version
    if waiting == 0 and dep.move(S.READY, "Serving.", engine_version=version):
        bump_routing_version()
    elif dep.state == S.READY:  # a restarted replica of a deployment that kept serving is back
        if waiting == 0:
            dep.progress("Serving.")
        bump_routing_version()
    elif waiting:
        dep.progress(f"{dep.replica_count - waiting} of {dep.replica_count} replicas ready.")


def _engine_version(replica: Replica, engine: str, tries: int = VERSION_TRIES, wait: float = VERSION_WAIT) -> str:
    """The version the running engine reports (engines.engine_version.VERSION_PATHS), "" when it says none in
    ``tries`` reads VERSION_PAUSE seconds apart, each given ``wait`` seconds; a read goes on to the next path only
    where the engine has no such path (404: an SGLang older than /server_info). Why each read failed is logged
    when it tries more than once (at ready, not at each reconcile's one read), never the body: SGLang's echoes
    its API key."""
    headers = {"Authorization": f"Bearer {replica.engine_api_key}"}  # SGLang guards its info with the key
    for attempt in range(tries):
        if attempt:
            time.sleep(VERSION_PAUSE)
        for path in VERSION_PATHS["sglang" if engine in SGLANG_ENGINES else "vllm"]:
            try:
                resp = httpx.get(f"{replica.base_url}{path}", headers=headers, timeout=wait)
                if resp.status_code == 200:
                    return version_from_engine(engine, resp.json())[:50]
                why = f"HTTP {resp.status_code}"
            except (httpx.HTTPError, ValueError) as exc:
                why = type(exc).__name__
            if tries > 1:
                log.info("%s: no engine version from %s (%s)", replica.runtime_name, path, why)
            if why != "HTTP 404":
                break
    return ""


def mend_engine_versions() -> None:
    """Read again the version of a ready deployment whose engine said none when it became ready (once per
    reconcile, one read each: an engine that never tells stays "")."""
    for dep in Deployment.objects.filter(state=S.READY, engine_version="").exclude(engine=EXTERNAL_ENGINE):
        replica = dep.replicas.launched().filter(running=True, ready_at__isnull=False).first()
        version = _engine_version(replica, dep.engine, tries=1, wait=MEND_WAIT) if replica else ""
        if version:
            Deployment.objects.filter(pk=dep.pk, engine_version="").update(engine_version=version)


def check_serving(deployment_id: int | None = None) -> None:
    """Ask each serving replica's runtime whether its engine still runs (of one deployment, or of every ready one),
    and end those that do not as ``engine_ended`` says: each reconcile for all, and at once for a deployment whose
    every replica the gateway could not reach (console.deployments.engine_checks)."""
    serving = Replica.objects.launched().filter(running=True, ready_at__isnull=False, deployment__state=S.READY)
    for replica in serving if deployment_id is None else serving.filter(deployment_id=deployment_id):
        status = get_runtime(replica.runtime).status(replica.runtime_name)
        if not status.running:
            engine_ended(replica, status)


def engine_ended(replica: Replica, status: RuntimeStatus) -> None:
    """A replica's engine is gone. Never served yet: the launch failed. Served before: restart it after
    a backoff that doubles with each crash in a row, up to HEARTH_MAX_RESTARTS; then the deployment fails.
    Claimed first: of two workers that notice the same exit, one handles it."""
    if not Replica.objects.filter(pk=replica.pk, running=True, started_at=replica.started_at).update(running=False):
        return
    dep = replica.deployment
    if replica.restarts == 0 and replica.ready_at is None:
        reason = end_replica(replica, status, "while loading")
        if added_replica_failed(replica, reason):
            return
        end_all(dep)
        dep.move(S.FAILED, reason)
        return
    if replica.ready_at and (timezone.now() - replica.ready_at).total_seconds() > STABLE_AFTER:
        replica.restarts = 0  # it served long enough: this crash starts a new count
    if replica.restarts >= settings.HEARTH_MAX_RESTARTS:
        reason = end_replica(replica, status, "while serving")
        end_all(dep)
        given_up = f"{reason} It crashed {replica.restarts + 1} times in a row; Hearth stopped restarting it."
        DeploymentEvent.note(dep, DeploymentEvent.Kind.CRASH, None, reason=f"{replica.runtime_name}: {given_up}")
        dep.move(S.FAILED, given_up)
        bump_routing_version()
        return
    delay = settings.HEARTH_RESTART_BACKOFF * 2**replica.restarts
    reason = note_crash(replica, status, delay)
    dispatch.send(dispatch.RESTART_REPLICA, replica.pk, countdown=delay)  # reconcile restarts it if this is lost
    what = f"{replica.runtime_name}: {reason} Restarting in {delay:.0f} s (restart {replica.restarts})."
    DeploymentEvent.note(dep, DeploymentEvent.Kind.CRASH, None, reason=what)  # in its history, not only its state
    serving = dep.replicas.filter(running=True, ready_at__isnull=False).count()
    if serving == 0:
        if dep.state == S.LOADING:
            dep.progress(what)
        else:
            dep.move(S.LOADING, what)
    else:
        Deployment.objects.filter(pk=dep.pk).update(state_reason=f"{serving} of {dep.replica_count} serving. {what}")
    bump_routing_version()


def restart(replica_id: int) -> None:
    """Start a crashed replica again once its backoff is over (claimed: a replica restarts once)."""
    now = timezone.now()
    replica = Replica.objects.launched().filter(pk=replica_id, running=False, stopped_at__isnull=True).first()
    if replica is None or replica.restart_at is None or replica.restart_at > now + timedelta(seconds=1):
        return
    if replica.deployment.state not in (S.LOADING, S.READY):
        return
    if not Replica.objects.filter(pk=replica.pk, restart_at=replica.restart_at).update(restart_at=None):
        return
    dep = replica.deployment
    slot = list(dep.replicas.launched().filter(stopped_at__isnull=True).order_by("pk")).index(replica)
    restart_port(replica)
    try:
        start_replica(replica, slot)
    except RuntimeError_ as exc:
        end_all(dep)
        dep.move(S.FAILED, f"Restarting {replica.runtime_name} failed: {exc}")
        bump_routing_version()
        return
    dispatch.send(dispatch.WATCH_REPLICA, replica.pk, countdown=WATCH_EVERY)
