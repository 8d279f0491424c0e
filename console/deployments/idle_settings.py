"""A deployment's idle settings: its idle policy (stay, sleep or stop), idle minutes, sleep level and always on,
checked against what its engine and version can do (engines.sleep_support), set on create and on change, and said
in words. The idle policy acts in reconcile (console.deployments.idling). Errors a user can fix raise ConsoleError.
"""

import os
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import transaction

from console.audit.recording import changed, record
from console.deployments.lifecycle import configured_version
from console.deployments.models import Deployment
from console.errors import ConsoleError
from engines.room import gib
from engines.sleep_support import SLEEP_LEVELS, IdlePolicy, refusal

MAX_IDLE_MINUTES = 7 * 24 * 60  # a week
FIELDS = ("idle_policy", "idle_minutes", "sleep_level", "always_on")


def check_idle_settings(
    engine: str, version: str, *, idle_policy: str, idle_minutes: int, sleep_level: int, always_on: bool
) -> None:
    """Raises ConsoleError naming why ``engine`` at ``version`` cannot have these idle settings (engines.
    sleep_support.refusal), or idle minutes outside 1 to MAX_IDLE_MINUTES."""
    if not 1 <= idle_minutes <= MAX_IDLE_MINUTES:
        raise ConsoleError(f"Idle minutes must be from 1 to {MAX_IDLE_MINUTES:,} (a week).")
    if sleep_level not in SLEEP_LEVELS:
        raise ConsoleError(f"Sleep level {sleep_level} does not exist: 1 (weights kept in host RAM) or 2 (dropped).")
    if why := refusal(engine, version, idle_policy, sleep_level, always_on):
        raise ConsoleError(why)


def idle_settings(dep: Deployment) -> dict[str, Any]:
    """The deployment's idle settings now, in set_idle_settings' keywords."""
    return {
        "idle_policy": dep.idle_policy,
        "idle_minutes": dep.idle_minutes,
        "sleep_level": dep.sleep_level,
        "always_on": dep.always_on,
    }


def merged(dep: Deployment, given: Mapping[str, Any]) -> dict[str, Any]:
    """The deployment's idle settings with those ``given`` over them, checked (ConsoleError as check_idle_settings
    raises it); nothing is stored."""
    new = idle_settings(dep) | dict(given)
    check_idle_settings(dep.engine, configured_version(dep.engine, dep.engine_image_ref), **new)
    return new


def set_idle_settings(
    dep: Deployment, *, idle_policy: str, idle_minutes: int, sleep_level: int, always_on: bool
) -> dict[str, list[object]]:
    """Store new idle settings (checked as check_idle_settings does) and audit what changed; returns it. They act
    at once, without a relaunch: an engine started without sleep mode (the policy was not sleep then) is stopped to
    save instead of put to sleep until its next launch. Raises ConsoleError."""
    version = configured_version(dep.engine, dep.engine_image_ref)
    check_idle_settings(
        dep.engine,
        version,
        idle_policy=idle_policy,
        idle_minutes=idle_minutes,
        sleep_level=sleep_level,
        always_on=always_on,
    )
    new = {"idle_policy": idle_policy, "idle_minutes": idle_minutes, "sleep_level": sleep_level, "always_on": always_on}
    diff = changed(idle_settings(dep), new)
    if diff:
        with transaction.atomic():
            Deployment.objects.filter(pk=dep.pk).update(**new)
            record(None, "deployment.idle_policy", dep, diff)
        for key, value in new.items():
            setattr(dep, key, value)
    return diff


def policy_words(dep: Deployment) -> str:
    """The idle policy in words: "sleep (level 1) after 30 min idle", "stop after 5 min idle", "stay up"; with the
    least time awake (HEARTH_MIN_RESIDENCY) where it is longer than the idle minutes, since it holds the policy back
    after a launch or a wake: "sleep (level 1) after 1 min idle, once up 2 min"; and where a level-1 sleep can never
    be taken on this host, that it is stopped instead."""
    awake = settings.HEARTH_MIN_RESIDENCY / 60
    least = f", once up {awake:g} min" if awake > dep.idle_minutes else ""
    if dep.idle_policy == IdlePolicy.SLEEP:
        return f"sleep (level {dep.sleep_level}) after {dep.idle_minutes} min idle{least}{_level_one_note(dep)}"
    if dep.idle_policy == IdlePolicy.STOP:
        return f"stop after {dep.idle_minutes} min idle{least}"
    return "stay up" + (" (always on)" if dep.always_on else "")


def _level_one_note(dep: Deployment) -> str:
    """Where a level-1 sleep's copy of the weights in host RAM (engines.room: every replica's) is more than the
    host's whole RAM, that the room stops the deployment instead (a trial's 70B on a 23 GiB host never slept)."""
    if dep.sleep_level != 1:
        return ""
    copy = dep.stored_plan.weights_bytes * max(dep.replica_count, 1)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if copy <= ram:
        return ""
    return (
        f" (a level-1 sleep copies its {gib(copy)} of weights to host RAM, more than this host's {gib(ram)}: it is "
        "stopped instead; level 2 keeps no copy)"
    )
