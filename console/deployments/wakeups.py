"""Asking for a deployment's wake, once however many ask: the gateway (a request for a deployment put aside to share
the GPUs, ``Deployment.asleep_or_saving``) and an admin's Wake call ``request_wake``; the worker's wake task
(console.deployments.sleeping.wake) releases the ask when it is done.

One wake at a time per deployment: ``SET wake:<id> NX EX`` (under appliance.redis_keys' prefix) before the task is
sent by name (console.deployments.dispatch: no console task module is imported, so the gateway may import this).
The key lapses after HEARTH_WAKE_TIMEOUT + LAPSE_MARGIN seconds should the worker die mid-wake.
"""

import redis
from django.conf import settings

from appliance.redis_keys import redis_key
from console.deployments import dispatch

NOT_WOKEN = "Not woken: "  # a failed wake's reason when no room was made (console.deployments.room_actions)
# said last in a room's refusal that waiting will not end (it needs an admin's consent, or nothing can be put aside):
# the gateway tells clients not to retry (gateway.holding)
ADMIN_MUST_ACT = " Only an admin can make this room."
LAPSE_MARGIN = 60  # seconds past HEARTH_WAKE_TIMEOUT an ask outlives a worker that died mid-wake
REDIS_TIMEOUT = 1.0  # seconds to connect or answer


def wake_key(deployment_id: int) -> str:
    """``hearth:<instance>:wake:<id>``: set while a wake of the deployment is asked for or under way."""
    return redis_key(f"wake:{deployment_id}")


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=REDIS_TIMEOUT, socket_timeout=REDIS_TIMEOUT)


def request_wake(
    deployment_id: int, reason: str = "A request came for it.", audited: bool = False, consent: bool = False
) -> bool:
    """Ask the worker to wake the deployment (console.deployments.tasks.wake_deployment, with ``reason`` in words
    for its history; ``audited``: the caller recorded the audit entry already, an admin's action; ``consent``: the
    admin's, to put aside idle deployments whose policy is stay, console.deployments.room_actions). True when this
    call sent the task; False when a wake was already asked for (nothing is sent). Blocking (Redis, then the
    broker): call it from a thread in async code.

    Raises redis.RedisError, or kombu's OperationalError when the broker cannot be reached (the ask is withdrawn
    then, so the next call tries again).
    """
    client = _client()
    try:
        lapse = int(settings.HEARTH_WAKE_TIMEOUT) + LAPSE_MARGIN
        if not client.set(wake_key(deployment_id), "1", nx=True, ex=lapse):
            return False
        try:
            dispatch.send(dispatch.WAKE, deployment_id, reason, audited, consent)
        except Exception:
            client.delete(wake_key(deployment_id))
            raise
        return True
    finally:
        client.close()


def wake_asked(deployment_id: int) -> bool:
    """Whether a wake of the deployment is asked for or under way. Raises redis.RedisError."""
    client = _client()
    try:
        return bool(client.exists(wake_key(deployment_id)))
    finally:
        client.close()


def release(deployment_id: int) -> None:
    """The wake asked for is over (done, failed or nothing to do): the next ask sends a task again. Raises
    redis.RedisError."""
    client = _client()
    try:
        client.delete(wake_key(deployment_id))
    finally:
        client.close()
