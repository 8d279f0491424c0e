"""Making room, then launching or waking (issue 29): the worker puts aside what the room says (engines.room, read by
console.deployments.room_making), through the idle actions' claims and the sleep and stop-to-save tasks
(console.deployments.idle_actions, sleeping), waits for them to be done, and only then launches or wakes.

- ``launch_when_room``: a deployment the admin launched (console.deployments.admin_actions.launch) waits in pending,
  "Waiting for room: ...", while the least recently used idle deployments are put aside (with the admin's consent,
  or by their own idle policy), then launches; room that cannot be made fails it with the words why.
- ``wake``: the wake task. A deployment asleep wakes where it sleeps, so the awake ones on its GPUs are put aside
  first (never by a request alone one whose idle policy is stay); one stopped to save, or stopped with the appliance
  while wanted serving (console.deployments.restoring), is launched on any GPUs. A wake
  that finds no room within HEARTH_WAKE_TIMEOUT leaves the deployment as it was, with a failed wake in its history
  saying why.

One decision at a time (a Redis lock under appliance.redis_keys' prefix), none while a sleep or stop to save is under
way; a deployment woken stays awake HEARTH_MIN_RESIDENCY seconds before the room may take it (engines.room).
"""

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis
from django.conf import settings
from django.db import transaction

from appliance.redis_keys import redis_key
from console.audit.recording import record
from console.deployments import changes, idle_actions, launching, sleeping, wakeups
from console.deployments.models import Deployment, DeploymentEvent, DeploymentState, DesiredState
from console.deployments.room_making import Asked, aside_of, fits_now, room_for
from console.deployments.wakeups import ADMIN_MUST_ACT, NOT_WOKEN
from console.errors import ConsoleError
from engines.room import GIB, Action, Room, Verdict

log = logging.getLogger(__name__)
S = DeploymentState
POLL_EVERY = 0.5  # seconds between looks while room is being made
LOCK_SECONDS = 30  # a decision holds the lock at most this long (a worker that dies lets it lapse)


@contextmanager
def decision() -> Iterator[None]:
    """Hold the room lock (``hearth:<instance>:room-lock``) for one decision. Raises ConsoleError when another
    decision kept it LOCK_SECONDS."""
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1.0, socket_timeout=LOCK_SECONDS + 5)
    lock = client.lock(redis_key("room-lock"), timeout=LOCK_SECONDS, blocking_timeout=LOCK_SECONDS)
    try:
        if not lock.acquire():
            raise ConsoleError("Another decision about the GPUs' room took too long.")
        try:
            yield
        finally:
            try:
                lock.release()
            except redis.exceptions.LockError:
                log.warning("the room lock lapsed during a decision")
    finally:
        client.close()


def settling() -> list[str]:
    """The deployments going to sleep or to stop to save now: no decision is taken until they are done."""
    going = Deployment.objects.filter(state=S.SLEEPING) | Deployment.objects.filter(
        state=S.STOPPING, desired=DesiredState.STOPPED_IDLE
    )
    return list(going.values_list("name", flat=True))


def numbers(room: Room) -> dict[str, object]:
    """The room for the audit log: what is needed, where, and each step's deployment, action, level, memory freed a
    GPU (GiB), GPUs and idle seconds."""
    return {
        "room": room.words(),
        "needs_gib_per_gpu": round(room.need.bytes_per_gpu / GIB, 1),
        "gpus": list(room.gpus),
        "put_aside": [
            {
                "deployment": s.holder.name,
                "action": str(s.action),
                "level": s.holder.sleep_level if s.action == Action.SLEEP else None,
                "frees_gib_per_gpu": round(s.frees / GIB, 1),
                "gpus": list(s.holder.gpus),
                "idle_seconds": round(s.holder.idle_seconds),
            }
            for s in room.steps
        ],
    }


def put_aside(room: Room, dep: Deployment) -> None:
    """Claim each step of ``room`` (the sleep or stop follows in its task) with the room's words as its reason, and
    audit the room on ``dep``. A step refused meanwhile (a request came in, it moved on) is logged and skipped: the
    next decision sees it."""
    reason = room.words()
    record(None, "deployment.make_room", dep, numbers(room))
    ids = aside_of(room)
    for step in room.steps:
        target = Deployment.objects.filter(name=step.holder.name).first()
        if target is None or target.pk not in ids:
            continue
        try:
            if step.action == Action.SLEEP:
                idle_actions.claim_sleep(target, reason)
            else:
                idle_actions.claim_stop_to_save(target, reason)
        except ConsoleError as exc:
            log.info("deployment %s: not put aside for %s (%s)", target.name, dep.name, exc)


def with_room(
    dep_id: int, state: str, in_place: bool, consent: bool, fits: Callable[[Deployment], bool]
) -> tuple[Deployment | None, str]:
    """Make room for the deployment while it stays in ``state``, until ``fits`` says (under the lock) that it has
    it, within HEARTH_WAKE_TIMEOUT seconds, its state reason saying what it waits for. Returns the deployment then;
    else None and why ("" when it left ``state`` meanwhile; ending with ADMIN_MUST_ACT where no wait would help)."""
    deadline, why = time.monotonic() + settings.HEARTH_WAKE_TIMEOUT, ""
    while time.monotonic() < deadline:
        dep = Deployment.objects.filter(pk=dep_id).first()
        if dep is None or dep.state != state:
            return None, ""
        said = ""  # the state reason's words, where ``why`` does not already say it waits for room
        try:
            with decision():
                going = settling()
                if not going and fits(dep):
                    return dep, ""
                if not going:
                    room = room_for(Asked(dep.name, dep.stored_plan, in_place), exclude=dep.pk, consent=consent)
                    why = room.words()
                    if room.verdict in (Verdict.ASK, Verdict.NONE):
                        return None, why + ADMIN_MUST_ACT
                    if room.verdict == Verdict.MAKE:
                        put_aside(room, dep)
                    said = why if room.verdict == Verdict.WAIT else ""
                else:
                    why = f"waiting for {', '.join(going)} to be put aside"
        except ConsoleError as exc:
            why = str(exc)
        # the page says why a launch, or a wake requests are held for, has not happened yet (a trial saw nothing)
        doing = "Waiting for room" if state == S.PENDING else "Waking once there is room"
        dep.progress(said or f"{doing}: {why}")
        time.sleep(POLL_EVERY)
    return None, f"No room within {settings.HEARTH_WAKE_TIMEOUT:.0f} s: {why}"


def _replanned(dep: Deployment) -> bool:
    """It fits the free GPUs now, and its plan names them (planned again on them if need be)."""
    return fits_now(dep) and changes.replan_on_free_gpus(dep) == ""


def launch_when_room(deployment_id: int, consent: bool) -> None:
    """pending (waiting for room) → the launch, once the room is made; failed with why when it cannot be."""
    dep, why = with_room(deployment_id, S.PENDING, in_place=False, consent=consent, fits=_replanned)
    if dep is not None:
        launching.launch(deployment_id)
    elif why:
        failed = Deployment.objects.filter(pk=deployment_id, state=S.PENDING).first()
        if failed is not None:
            failed.move(S.FAILED, f"Not launched: {why}")


def _settled(deployment_id: int) -> Deployment | None:
    """The deployment once its own sleep or stop to save is over (HEARTH_WAKE_TIMEOUT at most)."""
    deadline = time.monotonic() + settings.HEARTH_WAKE_TIMEOUT
    while (dep := Deployment.objects.filter(pk=deployment_id).first()) is not None:
        if dep.state != S.SLEEPING and not (dep.state == S.STOPPING and dep.desired == DesiredState.STOPPED_IDLE):
            return dep
        if time.monotonic() > deadline:
            return None
        time.sleep(POLL_EVERY)
    return None


def _fits_in_place(dep: Deployment) -> bool:
    return room_for(Asked(dep.name, dep.stored_plan, in_place=True), exclude=dep.pk).verdict == Verdict.FITS


def wake(deployment_id: int, reason: str, audited: bool = False, consent: bool = False) -> None:
    """The wake task: make room (module docstring; ``consent``: an admin's, to put aside a deployment whose idle
    policy is stay), then console.deployments.sleeping.wake. A wake without room releases the ask and notes a
    failed wake with why; the deployment stays as it was."""
    started = time.monotonic()
    dep = _settled(deployment_id)
    stopped_to_save = dep is not None and (dep.stopped_to_save or dep.relaunch_due)
    if dep is not None and dep.state == S.ASLEEP:
        dep, why = with_room(deployment_id, S.ASLEEP, in_place=True, consent=consent, fits=_fits_in_place)
    elif stopped_to_save:
        dep, why = with_room(deployment_id, S.STOPPED, in_place=False, consent=consent, fits=fits_now)
    else:
        why = ""
    if dep is None and why:
        wakeups.release(deployment_id)
        gone = Deployment.objects.filter(pk=deployment_id).first()
        if gone is not None:
            with transaction.atomic():
                seconds = time.monotonic() - started
                DeploymentEvent.note(gone, DeploymentEvent.Kind.WAKE_FAILED, seconds, reason=NOT_WOKEN + why)
                record(None, "deployment.wake", gone, {"reason": reason, "woken": False, "why": why})
                gone.progress(NOT_WOKEN + why)  # the page's head says it, not only the history below
        log.warning("deployment %s: not woken (%s)", deployment_id, why)
        return
    sleeping.wake(deployment_id, reason, audited)
