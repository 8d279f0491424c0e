"""The worker's side of sharing the GPUs over time (issue 29): put a deployment to sleep, stop it to save, wake it.

The decision is claimed first by whoever takes it (an admin's action or the idle policy, console.deployments.
idle_actions): ready → sleeping, or ready → stopping with desired "stopped_idle", the routing version bumped after
commit so the gateway stops routing to the engine before it sleeps. The tasks here carry it out:

- ``sleep``: wait for the requests still in flight to end (DRAIN_SECONDS; if they do not, the sleep is called off:
  sleeping → ready), then ``POST /sleep?level=L`` to every replica's engine (console.deployments.engine_sleep),
  → asleep, and its event (kind sleep, level, seconds, reason). An engine that fails to sleep is stopped: failed.
- ``stop_to_save``: the same drain, then every replica ended, → stopped, and its event (kind stop_idle).
- ``wake``: one at a time (console.deployments.wakeups asked for it). Asleep: → waking, ``POST /wake_up`` (level 2:
  weights, reload_weights, KV cache), → ready and the routing bumped; a failed wake stops the engine (nothing is
  left half-awake) and fails the deployment with the engine's reason. Stopped to save, or stopped with the appliance
  while wanted serving (console.deployments.restoring): the wake is a launch (admin_actions.launch). Either way
  ``wake_started_at`` is set, and the move to ready or failed that ends the wake records its event (Deployment.move).
"""

import logging
import time

import redis
from django.conf import settings
from django.utils import timezone

from console.audit.recording import record
from console.deployments import activity, engine_sleep, wakeups
from console.deployments.admin_actions import launch
from console.deployments.lifecycle import end_all
from console.deployments.models import (
    Deployment,
    DeploymentEvent,
    DeploymentState,
    DesiredState,
    EventNote,
    Replica,
)
from console.errors import ConsoleError
from console.fanout import bump_routing_version

log = logging.getLogger(__name__)
S = DeploymentState
SLEEP_TIMEOUT = 300.0  # seconds an engine's sleep may take (a level-1 copy of 70B weights to host RAM: ~4 s)
DRAIN_SECONDS = 3.0  # seconds the requests in flight get to end once the gateway no longer routes new ones
POLL_EVERY = 0.2  # seconds between looks at the requests in flight, or at a deployment settling


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1.0, socket_timeout=1.0)


def live_replicas(dep: Deployment) -> list[Replica]:
    """The replicas whose engines run now (an asleep engine runs too)."""
    return list(dep.replicas.launched().filter(stopped_at__isnull=True, running=True).order_by("pk"))


def slept_level(dep: Deployment) -> int:
    """The level its last sleep was at (the admin may have changed ``sleep_level`` since); 1 when none is known."""
    event = dep.events.filter(kind=DeploymentEvent.Kind.SLEEP).order_by("-at", "-pk").first()
    return event.level if event is not None and event.level else 1


def _drained(dep: Deployment) -> bool:
    """Whether its requests in flight ended within DRAIN_SECONDS (Redis unreachable: not known, so not drained)."""
    client = redis_client()
    try:
        return activity.drained(client, dep.pk, DRAIN_SECONDS, poll=POLL_EVERY)
    except redis.RedisError as exc:
        log.warning("deployment %s: requests in flight not known (%s)", dep.name, exc)
        return False
    finally:
        client.close()


def fail(dep: Deployment, reason: str, wake_level: int | None = None) -> None:
    """Stop every engine of ``dep`` (nothing left half-asleep or half-awake) and fail it with ``reason`` (a wake's
    failure from sleep level ``wake_level``)."""
    end_all(dep)
    dep.move(S.FAILED, reason, wake_level=wake_level)
    bump_routing_version()


def sleep(deployment_id: int, reason: str) -> None:
    """sleeping → asleep (or back to ready when requests would not drain; failed when an engine fails to sleep)."""
    dep = Deployment.objects.filter(pk=deployment_id).first()
    if dep is None or dep.state != S.SLEEPING:
        return
    if not _drained(dep):
        if dep.move(
            S.READY, "Serving: the sleep was called off, requests were still in flight.", desired=DesiredState.SERVING
        ):
            bump_routing_version()
        return
    level, started = dep.sleep_level, time.monotonic()
    try:
        for replica in live_replicas(dep):
            engine_sleep.sleep(replica, level, SLEEP_TIMEOUT)
    except engine_sleep.EngineCallError as exc:
        fail(dep, f"The sleep failed: {_sentence(exc)} Its engine was stopped; launch it again.")
        return
    seconds = time.monotonic() - started
    slept = EventNote(DeploymentEvent.Kind.SLEEP, seconds, level, reason)
    if dep.move(S.ASLEEP, f"Asleep at level {level}: {reason}", event=slept):
        log.info("deployment %s: asleep at level %s in %.2f s (%s)", dep.name, level, seconds, reason)


def stop_to_save(deployment_id: int, reason: str) -> None:
    """stopping (desired stopped_idle) → stopped: every replica ended once the requests in flight are done."""
    dep = Deployment.objects.filter(pk=deployment_id).first()
    if dep is None or dep.state != S.STOPPING or dep.desired != DesiredState.STOPPED_IDLE:
        return
    _drained(dep)  # it can no longer be called off: the stop is claimed
    started = time.monotonic()
    end_all(dep)
    seconds = time.monotonic() - started
    stopped = EventNote(DeploymentEvent.Kind.STOP_IDLE, seconds, reason=reason)
    dep.move(S.STOPPED, f"Stopped to save: {reason} The next request launches it again.", event=stopped)


def wake(deployment_id: int, reason: str, audited: bool = False) -> None:
    """Wake the deployment if it is asleep, stopped to save or stopped with the appliance while wanted serving
    (``relaunch_due``; waiting, up to HEARTH_WAKE_TIMEOUT, for a sleep or a stop to save under way to end first);
    record the audit entry unless ``audited``; release the ask (console.deployments.wakeups) whatever happens."""
    try:
        dep = _settled(deployment_id)
        if dep is None:
            return
        if dep.state == S.ASLEEP:
            _wake_in_place(dep, reason, audited)
        elif dep.state == S.STOPPED and (dep.desired == DesiredState.STOPPED_IDLE or dep.relaunch_due):
            _relaunch(dep, reason, audited)
    finally:
        wakeups.release(deployment_id)


def _settled(deployment_id: int) -> Deployment | None:
    """The deployment once no sleep or stop to save is under way; None when it is gone or did not settle in time."""
    deadline = time.monotonic() + settings.HEARTH_WAKE_TIMEOUT
    while (dep := Deployment.objects.filter(pk=deployment_id).first()) is not None:
        going = dep.state == S.SLEEPING or (dep.state == S.STOPPING and dep.desired == DesiredState.STOPPED_IDLE)
        if not going:
            return dep
        if time.monotonic() > deadline:
            log.warning("deployment %s: still %s after HEARTH_WAKE_TIMEOUT; not woken", dep.name, dep.state)
            return None
        time.sleep(POLL_EVERY)
    return None


def _note_activity(dep: Deployment) -> None:
    """A wake counts as a request: the idle policy does not put it back to sleep before its held requests come."""
    client = redis_client()
    try:
        activity.note_request(client, dep.pk, time.time())
    except redis.RedisError as exc:
        log.warning("deployment %s: its wake not noted as activity (%s)", dep.name, exc)
    finally:
        client.close()


def _wake_in_place(dep: Deployment, reason: str, audited: bool) -> None:
    level = slept_level(dep)
    if not dep.move(S.WAKING, f"Waking: {reason}", desired=DesiredState.SERVING, wake_started_at=timezone.now()):
        return
    if not audited:
        record(None, "deployment.wake", dep, {"reason": reason, "from": S.ASLEEP, "level": level})
    _note_activity(dep)
    started = time.monotonic()
    try:
        for replica in live_replicas(dep):
            engine_sleep.wake(replica, level, settings.HEARTH_WAKE_TIMEOUT)
    except engine_sleep.EngineCallError as exc:
        fail(
            dep,
            f"The wake failed: {_sentence(exc)} Its engine was stopped (nothing is left half-awake); launch it again.",
            level,
        )
        return
    if dep.move(S.READY, f"Serving (woke from level {level} in {time.monotonic() - started:.1f} s).", wake_level=level):
        bump_routing_version()


def _relaunch(dep: Deployment, reason: str, audited: bool) -> None:
    """The wake of a deployment stopped to save, or stopped with the appliance: its launch, the wake's start noted
    (ended by the move to ready or failed)."""
    now = timezone.now()
    wanted = (DesiredState.STOPPED_IDLE, DesiredState.SERVING)  # not one an admin kept stopped since it was read
    if not Deployment.objects.filter(pk=dep.pk, state=S.STOPPED, desired__in=wanted).update(wake_started_at=now):
        return
    dep.wake_started_at = now
    if not audited:
        record(
            None, "deployment.wake", dep, {"reason": reason, "from": "stopped" if dep.relaunch_due else "stopped_idle"}
        )
    _note_activity(dep)
    try:
        launch(dep)
    except ConsoleError as exc:
        Deployment.objects.filter(pk=dep.pk).update(wake_started_at=None)
        log.warning("deployment %s: not relaunched (%s)", dep.name, exc)


def _sentence(exc: Exception) -> str:
    """An engine's error as a sentence: its last mark added where it has none ("…:139" read on into the next)."""
    text = str(exc).strip()
    return text if text.endswith((".", "!", "?")) else f"{text}."
