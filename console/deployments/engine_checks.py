"""Asking the worker to look now whether a deployment's engines still run: the gateway, when it could reach none of a
ready deployment's replicas (a refused connection: an engine that just died), so the crash is noted, the console says
so and the restart's backoff begins at once, not at the next reconcile (a trial saw "ready: Serving." for 15 s after
a kill while the gateway answered 503). Its 503 says the engine "is being checked": now it is.

One ask at a time per deployment: ``SET engine-check:<id> NX EX ASK_EVERY`` (under appliance.redis_keys' prefix)
before the task (console.deployments.watching.check_serving) is sent by name (console.deployments.dispatch), so a
burst of refused requests sends one task; the key lapses by itself.
"""

import redis
from django.conf import settings

from appliance.redis_keys import redis_key
from console.deployments import dispatch

ASK_EVERY = 2  # seconds: at most one check asked per deployment in this time
REDIS_TIMEOUT = 1.0  # seconds to connect or answer


def check_key(deployment_id: int) -> str:
    """``hearth:<instance>:engine-check:<id>``: set while a check of the deployment's engines was asked lately."""
    return redis_key(f"engine-check:{deployment_id}")


def ask_check(deployment_id: int) -> bool:
    """Ask the worker to check the deployment's serving engines now; True when this call sent the task, False when
    one was asked within ASK_EVERY seconds. Blocking (Redis, then the broker): call it from a thread in async code.
    Raises redis.RedisError, or kombu's OperationalError when the broker cannot be reached."""
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=REDIS_TIMEOUT, socket_timeout=REDIS_TIMEOUT
    )
    try:
        if not client.set(check_key(deployment_id), "1", nx=True, ex=ASK_EVERY):
            return False
        dispatch.send(dispatch.CHECK_SERVING, deployment_id)
        return True
    finally:
        client.close()
