"""Putting a deployment aside to share the GPUs, as an admin asks or its idle policy decides: sleep it, stop it to
save, wake it (its idle settings: console.deployments.idle_settings).

A decision is claimed here, in the caller's transaction: the in-flight check, the conditional move (ready →
sleeping, or ready → stopping with desired "stopped_idle"), the audit entry; after commit the routing version is
bumped (the gateway stops routing to it) and the worker's task sent (console.deployments.sleeping carries it out).
Errors a user can fix raise ConsoleError.
"""

import redis
from django.db import transaction

from console.audit.recording import record
from console.deployments import activity, dispatch, external, wakeups
from console.deployments.lifecycle import configured_version
from console.deployments.models import Deployment, DeploymentState, DesiredState
from console.deployments.room_making import level_one_over_host
from console.deployments.sleeping import live_replicas, redis_client
from console.errors import ConsoleError
from console.fanout import bump_routing_version
from engines.sleep_support import IdlePolicy, refusal

S = DeploymentState


def can_sleep_now(dep: Deployment) -> bool:
    """Whether every engine of ``dep`` was started able to sleep (console.deployments.lifecycle.sleep_mode_on)."""
    replicas = live_replicas(dep)
    return bool(replicas) and all(r.sleep_mode for r in replicas)


def _in_flight(dep: Deployment) -> int:
    client = redis_client()
    try:
        return activity.in_flight(client, dep.pk)
    except redis.RedisError as exc:
        raise ConsoleError(f"Hearth cannot tell whether {dep.name} has requests in flight now ({exc}).") from None
    finally:
        client.close()


def _ready(dep: Deployment, words: str) -> None:
    """Refuse (ConsoleError) a deployment Hearth does not run, or one not ready."""
    external.refused(dep, words)
    if dep.state != S.READY:
        raise ConsoleError(f"{dep.name} is {dep.state_words}; only a ready deployment can be {words}.")


def _claim(dep: Deployment, target: str, desired: str, words: str, going: str) -> None:
    """Refuse a deployment that is not ready or has requests in flight; else move it, ``going`` its state reason
    (ConsoleError if another move came first)."""
    _ready(dep, words)
    if count := _in_flight(dep):
        raise ConsoleError(f"{dep.name} has {count} request{'s' if count > 1 else ''} in flight; it stays awake.")
    if not dep.move(target, going, desired=desired):
        raise ConsoleError(f"{dep.name} changed state meanwhile; try again.")


def claim_sleep(dep: Deployment, reason: str) -> None:
    """ready → sleeping, ``reason`` in words (audited, and the history's); the sleep follows after commit. Raises
    ConsoleError: not ready, requests in flight, or its engine started without sleep mode; ServiceAway: the task
    queue does not answer (dispatch.send_after_commit)."""
    _ready(dep, "put to sleep")
    if not can_sleep_now(dep):
        version = configured_version(dep.engine, dep.engine_image_ref)
        if why := refusal(dep.engine, version, IdlePolicy.SLEEP, dep.sleep_level, dep.always_on):
            raise ConsoleError(f"{dep.name} cannot be put to sleep: {why}")  # no advice to set what is refused
        raise ConsoleError(
            f"{dep.name}'s engine was started without sleep mode: set its idle policy to sleep and launch it again, "
            "or stop it."
        )
    with transaction.atomic():
        _claim(dep, S.SLEEPING, DesiredState.ASLEEP, "put to sleep", "Going to sleep.")
        record(None, "deployment.sleep", dep, {"reason": reason, "level": dep.sleep_level})
        transaction.on_commit(bump_routing_version)
        dispatch.send_after_commit(dispatch.SLEEP, dep.pk, reason)


def claim_stop_to_save(dep: Deployment, reason: str) -> None:
    """ready → stopping with desired "stopped_idle", ``reason`` in words; the stop follows after commit (a request
    launches it again). Raises ConsoleError: not ready, or requests in flight; ServiceAway: the task queue does not
    answer."""
    with transaction.atomic():
        _claim(dep, S.STOPPING, DesiredState.STOPPED_IDLE, "stopped to save", "Stopping to save.")
        record(None, "deployment.stop_idle", dep, {"reason": reason})
        transaction.on_commit(bump_routing_version)
        dispatch.send_after_commit(dispatch.STOP_IDLE, dep.pk, reason)


def sleep_by_hand(dep: Deployment) -> None:
    """An admin's Sleep: at the deployment's sleep level. Raises ConsoleError as claim_sleep does, and for a level-1
    sleep whose copy of the weights the host RAM cannot hold now (room_making.level_one_over_host)."""
    if over := level_one_over_host(dep):
        raise ConsoleError(
            f"{dep.name} cannot sleep at level 1 now: {over}. Set its sleep level to 2 (weights dropped, reloaded on "
            "wake), or stop it."
        )
    claim_sleep(dep, "Put to sleep by an admin.")


def wake_by_hand(dep: Deployment, make_room: bool = False) -> None:
    """An admin's Wake of a deployment asleep or stopped to save (the worker's wake task, asked once), ``make_room``
    the admin's consent to put aside idle deployments whose policy is stay. Raises ConsoleError for one in another
    state; ServiceAway when the task queue does not answer."""
    external.refused(dep, "wake")
    if dep.state not in (S.SLEEPING, S.ASLEEP) and not dep.stopped_to_save:
        raise ConsoleError(f"{dep.name} is {dep.state_words}; only one asleep or stopped to save can be woken.")
    dispatch.check_queue()
    with transaction.atomic():
        asked = {"reason": "Woken by an admin.", "from": dep.state, "make_room": make_room}
        record(None, "deployment.wake", dep, asked)
        transaction.on_commit(
            lambda: wakeups.request_wake(dep.pk, "Woken by an admin.", audited=True, consent=make_room)
        )
