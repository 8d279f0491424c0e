"""A deployment's swaps, read from its history of sleeps, wakes, stops to save and failed wakes (DeploymentEvent,
kept by console.deployments.sleeping): its state in words and since when, how often it slept and its wake times
over a window, and how long it was asleep (the GPU time the cost panels count apart from serving).

The state in words: "ready", "going to sleep", "asleep (level 2)", "waking", "stopped to save", else the state as
the console says it. Times: Unix seconds or datetimes; durations in seconds. Wake times are the worker's, from the
wake's start to ready (a wake in place, or the launch of one stopped to save): they leave out the wait for room
before it (another model put aside first, or an admin's stop). What clients waited is the held times: each request
held for the deployment's wake, from the request log's ``wake_seconds`` (gateway.holding: the wait for room
included, and a hold that ended refused). Percentiles by nearest rank.
"""

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from console.deployments.models import Deployment, DeploymentEvent, DeploymentState
from console.deployments.wakeups import NOT_WOKEN
from console.observability.models import RequestLog
from engines.room import duration_words

S = DeploymentState
K = DeploymentEvent.Kind
WINDOW = 24 * 3600  # seconds the panels and /metrics count sleeps and wakes over
ASLEEP = (S.SLEEPING, S.ASLEEP, S.WAKING)


def last_level(dep: Deployment) -> int | None:
    """The level of its newest sleep; None when it never slept."""
    event = dep.events.filter(kind=K.SLEEP).order_by("-at", "-pk").first()
    return event.level if event is not None else None


def state_label(dep: Deployment) -> str:
    """Its state in words (module docstring)."""
    if dep.state == S.ASLEEP:
        level = last_level(dep)
        return f"asleep (level {level})" if level else "asleep"
    if dep.state == S.SLEEPING:
        return "going to sleep"
    return dep.state_words


def state_class(dep: Deployment) -> str:
    """The CSS class its state word is coloured by (static/hearth.css): the state, or "saving" for one stopped to
    save."""
    if dep.stopped_to_save:
        return "saving"
    return str(dep.state)


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` (0–1) percentile of ``values``; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class Swaps:
    """Over the window: sleeps (by level), stops to save, wakes, failed wakes and wakes no room was made for
    (``not_woken``: it stayed put aside), the wakes' p50 and p99 seconds,
    the requests held for a wake and their held p50 and p99 seconds; and ``asleep_seconds``, how long it was put aside
    in it: asleep (or going to sleep, or waking) or stopped to save."""

    sleeps: int = 0
    by_level: tuple[tuple[int, int], ...] = ()
    stops: int = 0
    wakes: int = 0
    failed: int = 0
    not_woken: int = 0
    wake_p50: float | None = None
    wake_p99: float | None = None
    held: int = 0
    held_p50: float | None = None
    held_p99: float | None = None
    asleep_seconds: float = 0.0


def swaps(dep: Deployment, now: datetime, window: float = WINDOW) -> Swaps:
    """``dep``'s swaps over the ``window`` seconds before ``now``."""
    start = now - timedelta(seconds=window)
    events = window_events(dep, start)
    sleeps = [e for e in events if e.kind == K.SLEEP]
    levels: dict[int, int] = {}
    for e in sleeps:
        levels[e.level or 1] = levels.get(e.level or 1, 0) + 1
    woke = [e.seconds for e in events if e.kind == K.WAKE and e.seconds is not None]
    rows = RequestLog.objects.filter(model=dep.served_model_name, created_at__gte=start, wake_seconds__isnull=False)
    held = [s for s in rows.values_list("wake_seconds", flat=True) if s is not None]
    return Swaps(
        sleeps=len(sleeps),
        by_level=tuple(sorted(levels.items())),
        stops=sum(1 for e in events if e.kind == K.STOP_IDLE),
        wakes=len(woke),
        failed=sum(1 for e in events if e.kind == K.WAKE_FAILED and not e.reason.startswith(NOT_WOKEN)),
        not_woken=sum(1 for e in events if e.kind == K.WAKE_FAILED and e.reason.startswith(NOT_WOKEN)),
        wake_p50=percentile(woke, 0.5),
        wake_p99=percentile(woke, 0.99),
        held=len(held),
        held_p50=percentile(held, 0.5),
        held_p99=percentile(held, 0.99),
        asleep_seconds=asleep_seconds(dep, start, now, events),
    )


PUT_ASIDE = (K.SLEEP, K.STOP_IDLE)  # the events that free a deployment's GPUs until its next wake


def window_events(dep: Deployment, start: datetime) -> list[DeploymentEvent]:
    """``dep``'s events since ``start``, oldest first."""
    return list(dep.events.filter(at__gte=start).order_by("at", "pk"))


def asleep_seconds(dep: Deployment, start: datetime, end: datetime, events: list[DeploymentEvent]) -> float:
    """Seconds of [start, end] it spent put aside, asleep or stopped to save (both free its GPUs and are not
    charged; a trial's model stopped to save for 12 min counted nowhere): from each sleep or stop to save (its
    event's time) to the next wake or failed wake (not one that found no room: it stayed put aside), or to its last
    change of state when it was stopped meanwhile; put aside since before ``start`` when its last event before it
    was one of those. ``events``: its events in the window, oldest first."""
    before = dep.events.filter(at__lt=start).order_by("-at", "-pk").first()
    since = start if before is not None and before.kind in PUT_ASIDE else None
    total = 0.0
    for e in events:
        if e.kind in PUT_ASIDE and since is None:
            since = e.at
        elif e.kind in (K.WAKE, K.WAKE_FAILED) and since is not None and not e.reason.startswith(NOT_WOKEN):
            total += (e.at - since).total_seconds()
            since = None
    if since is not None:
        until = end if dep.state in ASLEEP or dep.stopped_to_save else max(since, min(end, dep.state_since))
        total += (until - since).total_seconds()
    return max(total, 0.0)


def since_words(dep: Deployment, now: datetime | None = None) -> str:
    """How long it has been in its state: "12 min", "3 h 5 min" (engines.room's words)."""
    moment = now or datetime.now(UTC)
    return duration_words(max((moment - dep.state_since).total_seconds(), 0.0))
