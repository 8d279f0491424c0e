"""The idle policy, run by reconcile (every HEARTH_RECONCILE_INTERVAL seconds): a ready deployment whose policy is
sleep or stop, not always on, with no request in flight, idle for its idle minutes (since its last request, or since
it became ready if later: console.deployments.activity) and awake at least HEARTH_MIN_RESIDENCY seconds, is put to
sleep, or stopped to save (console.deployments.idle_actions claims it, with the reason in words: "idle for 31 min
(policy: sleep after 30 min)"). An engine started without sleep mode whose policy is now sleep is stopped to save
instead, and says so. Also: a sleep or wake whose worker died is carried on.
"""

import logging
import time
from datetime import timedelta

import redis
from django.conf import settings
from django.utils import timezone

from console.deployments import activity, dispatch
from console.deployments.idle_actions import can_sleep_now, claim_sleep, claim_stop_to_save
from console.deployments.models import Deployment, DeploymentState
from console.deployments.room_making import level_one_over_host
from console.deployments.sleeping import SLEEP_TIMEOUT, fail, redis_client
from console.errors import ConsoleError
from engines.external import EXTERNAL_ENGINE
from engines.room import duration_words
from engines.sleep_support import IdlePolicy

log = logging.getLogger(__name__)
S = DeploymentState


def idle_verdict(
    *,
    now: float,
    policy: str,
    idle_minutes: int,
    last_request: float | None,
    ready_since: float,
    in_flight: int,
    residency: float,
) -> str:
    """Why a ready deployment should be put aside now, in words ("idle for 31 min (policy: sleep after 30 min)");
    "" when it should not: policy stay, a request in flight, awake (``ready_since``) under ``residency`` seconds, or
    idle (since ``last_request`` or ``ready_since``, whichever is later) under ``idle_minutes``. Times are Unix
    seconds."""
    if policy == IdlePolicy.STAY or in_flight or now - ready_since < residency:
        return ""
    idle = now - max(last_request or ready_since, ready_since)
    if idle < idle_minutes * 60:
        return ""
    return f"idle for {duration_words(idle)} (policy: {policy} after {idle_minutes} min)"


def apply_idle_policies() -> None:
    """Put aside the ready deployments their idle policy says to (idle_verdict); Redis unreachable: none."""
    candidates = (
        Deployment.objects.filter(state=S.READY, always_on=False)
        .exclude(idle_policy=IdlePolicy.STAY)
        .exclude(engine=EXTERNAL_ENGINE)
    )
    deps = list(candidates)
    if not deps:
        return
    client = redis_client()
    try:
        for dep in deps:
            _apply(client, dep)
    except redis.RedisError as exc:
        log.warning("idle policy not applied: Redis does not answer (%s)", exc)
    finally:
        client.close()


def _apply(client: redis.Redis, dep: Deployment) -> None:
    verdict = idle_verdict(
        now=time.time(),
        policy=dep.idle_policy,
        idle_minutes=dep.idle_minutes,
        last_request=activity.last_request(client, dep.pk),
        ready_since=dep.state_since.timestamp(),
        in_flight=activity.in_flight(client, dep.pk),
        residency=settings.HEARTH_MIN_RESIDENCY,
    )
    if not verdict:
        return
    reason = verdict[0].upper() + verdict[1:] + "."
    try:
        if dep.idle_policy == IdlePolicy.SLEEP and can_sleep_now(dep) and (over := level_one_over_host(dep)):
            claim_stop_to_save(dep, f"{reason} {over[0].upper()}{over[1:]}: stopped instead.")
        elif dep.idle_policy == IdlePolicy.SLEEP and can_sleep_now(dep):
            claim_sleep(dep, reason)
        elif dep.idle_policy == IdlePolicy.SLEEP:
            claim_stop_to_save(
                dep, f"{reason} Its engine was started without sleep mode; it sleeps after its next launch."
            )
        else:
            claim_stop_to_save(dep, reason)
    except ConsoleError as exc:  # it moved meanwhile, or a request came in
        log.info("deployment %s: idle policy not applied (%s)", dep.name, exc)


def resume_stale_swaps() -> None:
    """A sleep or a wake whose worker died (no change for its timeout plus HEARTH_STALE_AFTER seconds): a sleep is
    sent again (the task re-reads the row; a second /sleep changes nothing); a wake fails and its engine is stopped,
    since it may be half-awake."""
    stale, now = settings.HEARTH_STALE_AFTER, timezone.now()
    sleeping = now - timedelta(seconds=SLEEP_TIMEOUT + stale)
    for dep in Deployment.objects.filter(state=S.SLEEPING, updated_at__lt=sleeping):
        log.warning("deployment %s: its sleep went silent; carrying it on", dep.name)
        dispatch.send(dispatch.SLEEP, dep.pk, "Its sleep was carried on after its worker stopped.")
    waking = now - timedelta(seconds=settings.HEARTH_WAKE_TIMEOUT + stale)
    for dep in Deployment.objects.filter(state=S.WAKING, updated_at__lt=waking):
        fail(dep, "The wake went silent (its worker stopped mid-wake). Its engine was stopped; launch it again.")
