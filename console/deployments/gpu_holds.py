"""What each deployment holds on each GPU now, by engines.room's memory rule: an awake engine its GPUs to itself (its
awake bytes on each), an asleep one its residue (1.4 GiB a GPU), a stopped one nothing. The planner's free GPUs
(console.deployments.planning), the room made for another deployment (console.deployments.room_making) and the GPU
strip (console.observability.gpu_strip) all read it here.

An asleep deployment whose wake is asked for (console.deployments.wakeups) holds its GPUs as an awake one: they are
promised to it. ``aside`` plans as if some deployments were put aside: id → "sleep" (its residue) or "stop" (none).
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import redis

from console.deployments import wakeups
from console.deployments.models import ACTIVE_STATES, Deployment, DeploymentState
from engines.external import EXTERNAL_ENGINE
from engines.gpus import Inventory
from engines.room import Action, asleep_bytes_per_gpu, awake_bytes_per_gpu

log = logging.getLogger(__name__)
S = DeploymentState


@dataclass(frozen=True)
class Hold:
    """One deployment's GPUs and what it holds on each (bytes): ``awake_bytes`` awake; while ``asleep``, its residue
    alone (then the GPUs are not its alone)."""

    dep: Deployment
    gpus: tuple[int, ...]
    awake_bytes: int
    asleep: bool

    @property
    def bytes_per_gpu(self) -> int:
        return asleep_bytes_per_gpu(self.awake_bytes) if self.asleep else self.awake_bytes


def _wake_asked(dep_id: int) -> bool:
    try:
        return wakeups.wake_asked(dep_id)
    except redis.RedisError as exc:
        log.warning("deployment %s: whether a wake is asked is not known (%s); counted as asleep", dep_id, exc)
        return False


def holds(exclude: int | None = None, aside: Mapping[int, str] | None = None) -> list[Hold]:
    """Every deployment's hold on the GPUs but ``exclude``'s, as if ``aside`` were done; a deployment on the CPU or
    made of engines Hearth did not launch holds none."""
    aside = aside or {}
    out = []
    active = Deployment.objects.filter(state__in=ACTIVE_STATES).exclude(pk=exclude or 0).exclude(engine=EXTERNAL_ENGINE)
    for dep in active.order_by("pk"):
        plan = dep.stored_plan
        if plan.gpu is None or not plan.gpu_indices or aside.get(dep.pk) == Action.STOP:
            continue
        asleep = aside.get(dep.pk) == Action.SLEEP or (dep.state == S.ASLEEP and not _wake_asked(dep.pk))
        out.append(Hold(dep, plan.gpu_indices, awake_bytes_per_gpu(plan.as_gpu()), asleep))
    return out


def held_gpus(exclude: int | None = None, aside: Mapping[int, str] | None = None) -> dict[int, str]:
    """GPU index → the deployment holding it alone (awake, or going to sleep or to stop, or waking)."""
    return {i: h.dep.name for h in holds(exclude, aside) if not h.asleep for i in h.gpus}


def residues(found: list[Hold]) -> dict[int, int]:
    """GPU index → bytes the asleep deployments among ``found`` still hold on it."""
    out: dict[int, int] = {}
    for h in found:
        if h.asleep:
            for i in h.gpus:
                out[i] = out.get(i, 0) + h.bytes_per_gpu
    return out


def others_use(inventory: Inventory, found: list[Hold]) -> dict[int, int]:
    """GPU index → bytes processes other than Hearth's engines use: what the inventory reads (NVML's used memory,
    Hearth's engines in it; 0 on a simulated box) less what ``found`` (every hold now) holds there, never below 0."""
    ours: dict[int, int] = {}
    for h in found:
        for i in h.gpus:
            ours[i] = ours.get(i, 0) + h.bytes_per_gpu
    return {d.index: max(0, d.memory_used_bytes - ours.get(d.index, 0)) for d in inventory.devices}
