"""The room a deployment needs on the GPUs, read from what runs now (issue 29): each deployment's hold
(console.deployments.gpu_holds), its last request and requests in flight (console.deployments.activity, the
gateway's keys), its idle settings, and the box (the GPU inventory, the host RAM free for level-1 sleeps), handed to
engines.room.make_room, which picks the least recently used idle deployments to put aside and says so in words.

Nothing is changed here: console.deployments.room_actions acts on the answer. Errors a user can fix raise
ConsoleError.
"""

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings

from appliance.hardware import InventoryError, current_inventory
from console.catalog.models import ModelSource
from console.deployments import activity, gpu_holds
from console.deployments.changes import current_settings, preview_change
from console.deployments.models import Deployment, DeploymentEvent, DeploymentState, DesiredState
from console.deployments.planning import plan_for
from console.errors import ConsoleError
from engines.gpus import Inventory
from engines.room import Box, Holder, Need, Room, Verdict, awake_bytes_per_gpu, gib, gpus_words, make_room
from engines.stored_plan import StoredPlan

S = DeploymentState
MEMINFO = "/proc/meminfo"


def host_available_bytes() -> int:
    """Host RAM a new allocation can take now, bytes: the kernel's MemAvailable (proc(5)), else the free pages."""
    try:
        with open(MEMINFO) as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def slept_at(dep: Deployment) -> int:
    """The level of its last sleep (1 when none is known)."""
    event = dep.events.filter(kind=DeploymentEvent.Kind.SLEEP).order_by("-at", "-pk").first()
    return event.level if event is not None and event.level else 1


def _can_sleep(dep: Deployment) -> bool:
    """Every engine of ``dep`` runs and was started able to sleep."""
    live = list(dep.replicas.launched().filter(stopped_at__isnull=True, running=True))
    return bool(live) and all(r.sleep_mode for r in live)


def _holder(hold: gpu_holds.Hold, client: redis.Redis, now: float) -> Holder:
    dep = hold.dep
    ready_since = dep.state_since.timestamp()
    last = activity.last_request(client, dep.pk)
    going = dep.state == S.SLEEPING or (dep.state == S.STOPPING and dep.desired == DesiredState.STOPPED_IDLE)
    return Holder(
        name=dep.name,
        gpus=hold.gpus,
        awake_bytes=hold.awake_bytes,
        state="waking" if dep.state == S.ASLEEP and not hold.asleep else dep.state_words,
        ready=dep.state == S.READY,
        asleep=hold.asleep or going,
        idle_seconds=now - max(last or ready_since, ready_since),
        awake_seconds=now - ready_since,
        in_flight=activity.in_flight(client, dep.pk, now),
        always_on=dep.always_on,
        policy=dep.idle_policy,
        can_sleep=_can_sleep(dep),
        sleep_level=dep.sleep_level,
        host_bytes=_copy_bytes(dep),
    )


def _box(inventory: Inventory, now_holds: list[gpu_holds.Hold]) -> Box:
    """The GPUs and the host RAM free for level-1 copies (``_host_free``)."""
    totals = {d.index: d.memory_total_bytes for d in inventory.devices}
    return Box(totals, gpu_holds.others_use(inventory, now_holds), _host_free(inventory.simulated, now_holds))


def _host_free(simulated: bool, now_holds: list[gpu_holds.Hold]) -> int:
    """Host RAM free for a level-1 copy, bytes. On a simulated box the level-1 copies of the deployments asleep now
    are taken from what the host has (the simulator makes none)."""
    host = host_available_bytes()
    if simulated:
        host -= sum(_copy_bytes(h.dep) for h in now_holds if h.asleep and slept_at(h.dep) == 1)
    return max(host, 0)


def _copy_bytes(dep: Deployment) -> int:
    """What a level-1 sleep of ``dep`` copies to host RAM: every replica's weights, bytes."""
    return dep.stored_plan.weights_bytes * max(dep.replica_count, 1)


def level_one_over_host(dep: Deployment) -> str:
    """Why ``dep``'s sleep at level 1 cannot be taken now, as engines.room says it when it makes room: its weights'
    copy is more than the host RAM free ("a level-1 sleep would copy 131.4 GiB of weights to host RAM, 20.9 GiB is
    free"); "" at level 2, for a copy that fits, or on a simulated box (its engines copy nothing to this host, and a
    test run's RAM is not the simulated box's). The idle policy stops such a deployment instead and an admin's
    Sleep is refused (a trial's 70B went to sleep at level 1 on a 23 GiB host: on real GPUs, the kernel's OOM
    killer's work)."""
    if dep.sleep_level != 1:
        return ""
    try:
        if current_inventory().simulated:
            return ""
    except InventoryError:
        pass
    copy, free = _copy_bytes(dep), host_available_bytes()  # a real box: its copies are in MemAvailable already
    if copy <= free:
        return ""
    return f"a level-1 sleep would copy {gib(copy)} of weights to host RAM, {gib(free)} is free"


@dataclass(frozen=True)
class Asked:
    """What a deployment needs: its name, the plan it would run, and whether it must run on that plan's GPUs (a wake
    in place) or may run on any."""

    name: str
    plan: StoredPlan
    in_place: bool = False


def room_for(asked: Asked, exclude: int | None = None, consent: bool = False) -> Room:
    """The room for ``asked`` among every deployment but ``exclude`` (the one asking), by engines.room.make_room with
    HEARTH_MIN_RESIDENCY. Raises ConsoleError when the inventory cannot be read or Redis does not answer (whether
    requests are in flight is then not known, so nothing may be put aside)."""
    plan = asked.plan
    try:
        inventory = current_inventory()
    except InventoryError as exc:
        raise ConsoleError(str(exc)) from None
    now_holds = gpu_holds.holds(exclude)
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1.0, socket_timeout=1.0)
    try:
        now = time.time()
        holders = [_holder(h, client, now) for h in now_holds]
    except redis.RedisError as exc:
        raise ConsoleError(f"Hearth cannot tell which deployments have requests in flight now ({exc}).") from None
    finally:
        client.close()
    need = Need(
        asked.name,
        awake_bytes_per_gpu(plan.as_gpu()),
        len(plan.gpu_indices),
        plan.gpu_indices if asked.in_place else (),
    )
    return make_room(
        need, holders, _box(inventory, now_holds), residency=settings.HEARTH_MIN_RESIDENCY, consent=consent
    )


def aside_of(room: Room) -> dict[int, str]:
    """The deployments ``room`` puts aside, id → "sleep" or "stop" (planning's ``aside``)."""
    ids = dict(Deployment.objects.filter(name__in=[s.holder.name for s in room.steps]).values_list("name", "pk"))
    return {ids[s.holder.name]: str(s.action) for s in room.steps if s.holder.name in ids}


def fits_now(dep: Deployment) -> bool:
    """Whether ``dep`` can launch on the free GPUs now: its plan's GPUs are free, or its plan made again on the free
    ones fits (as the launch does it: console.deployments.changes.replan_on_free_gpus). A CPU plan always can."""
    plan = dep.stored_plan
    if plan.gpu is None:
        return True
    held = gpu_holds.held_gpus(exclude=dep.pk)
    if not any(i in held for i in plan.gpu_indices):
        return True
    try:
        return preview_change(dep, **current_settings(dep)).plan.fits
    except ConsoleError:
        return False


def room_for_launch(dep: Deployment, consent: bool = False) -> Room | None:
    """The room ``dep``'s launch needs; None when it fits the free GPUs now (or runs on the CPU)."""
    if fits_now(dep):
        return None
    room = room_for(Asked(dep.name, dep.stored_plan), exclude=dep.pk, consent=consent)
    return None if room.verdict == Verdict.FITS else room


@dataclass(frozen=True)
class NewPlan:
    """A new deployment's plan (as if the room were made, when it needs some), the room (None: it fits the free GPUs
    as they are, or no room would help) and why it cannot be created as asked ("" when it can)."""

    plan: StoredPlan
    room: Room | None = None
    refusal: str = ""


def new_plan(name: str, model: ModelSource, engine: str, options: Mapping[str, Any], consent: bool) -> NewPlan:
    """The plan of a new deployment called ``name`` (plan_for's ``options``) and the room it needs. One that does not
    fit the free GPUs is planned on the whole box, as if every other deployment were stopped: if it fits there, the
    room says what to put aside, and the plan is made as if that were done (on the GPUs it frees); a room that waits
    (a residency, a request in flight) keeps the whole box's plan, and the launch plans again. A room that needs the
    consent not given, or none at all, is the refusal, after the plan's own reason. Raises ConsoleError as plan_for
    does."""
    error = ""
    try:
        plan: StoredPlan | None = plan_for(model, engine, **options)
    except ConsoleError as exc:
        plan, error = None, str(exc)  # every GPU is held: the whole box says whether room would help
    if plan is not None and (plan.fits or plan.gpu is None):
        return NewPlan(_sleepers_noted(plan))
    everyone = dict.fromkeys(Deployment.objects.values_list("pk", flat=True), "stop")
    whole = plan_for(model, engine, **options, aside=everyone)
    if not whole.fits:
        if plan is None:
            raise ConsoleError(error)
        return NewPlan(plan)
    why = error if plan is None else " ".join([plan.reasons[-1], *plan.remedies])
    room = room_for(Asked(name, whole), consent=consent)
    if room.verdict == Verdict.MAKE:
        made = plan_for(model, engine, **options, aside=aside_of(room))
        return NewPlan(_sleepers_noted(made.noted(f"At launch: {room.words()}", first=True)), room)
    if room.verdict == Verdict.WAIT:
        return NewPlan(whole.noted(f"At launch: {room.words()}", first=True), room)
    consent_words = " Create it with Make room (API: make_room) to put them aside and launch it."
    hint = consent_words if room.verdict == Verdict.ASK else ""
    return NewPlan(plan or whole, room, f"{why} {room.words()}{hint}")


def _sleepers_noted(plan: StoredPlan) -> StoredPlan:
    """``plan`` with a reason naming each deployment asleep on GPUs it takes: that one wakes in place, so its wake
    will need them back (a trial's new always-up deployment stranded a sleeping one, nothing said at create)."""
    taken = set(plan.gpu_indices)
    for hold in gpu_holds.holds():
        if hold.asleep and (shared := taken & set(hold.gpus)):
            plan = plan.noted(
                f"{hold.dep.name} is asleep on {gpus_words(sorted(shared))}, which this plan takes: its wake needs "
                "them back and puts this deployment aside by its idle policy (one that stays up, only with an "
                "admin's consent)."
            )
    return plan
