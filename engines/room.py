"""Making room on the GPUs by putting idle deployments aside (issue 29): what a deployment holds on each GPU awake
and asleep, and which least recently used idle deployments to put to sleep or stop so that another one fits, said
in words with numbers ("to fit B (73.2 GiB per GPU on GPUs 0–3) put A to sleep (idle 3 h 12 min, frees 71.8 GiB on
GPUs 0–3)").

Pure: the deployments (``Holder``), what is needed (``Need``) and the box (``Box``) in, a ``Room`` out. Memory in
bytes per GPU, times in seconds.

The memory rule, one for the plan, the room and the GPU strip:

- awake, an engine holds ``awake_bytes_per_gpu`` of each of its GPUs: the plan's share for vLLM
  (``gpu_memory_utilization`` × the total vLLM sees), the CUDA context outside it and the CUDA graphs captured in
  the headroom (engines.planner's split and its CUDA_CONTEXT; an H100 measured 73.9 GiB awake, this gives 73.2);
- asleep (levels 1 and 2 alike), ``ASLEEP_BYTES_PER_GPU``: 1.4 GiB, what vLLM kept of an H100 asleep (73.9 → 1.4
  GiB, ai-dynamo/dynamo#11233; engines/simulator/SLEEP.md; the simulator's ``hearth_sim_gpu_memory_bytes`` shows
  the same figure), or what it holds awake if that is less;
- stopped, nothing.

Hearth gives an awake deployment its GPUs to itself (console.deployments.planning), so a GPU with an awake holder
has no room; one with asleep holders has its total less their residues and less what other processes use.

A level-1 sleep copies the engine's weights to pinned host RAM (``Holder.host_bytes``): the room counts them against
``Box.host_free_bytes`` and stops an engine whose copy does not fit instead of putting it to sleep, and says so.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from engines.planner import CUDA_CONTEXT, GpuPlan

GIB = 1024**3
ASLEEP_BYTES_PER_GPU = int(1.4 * GIB)  # ai-dynamo/dynamo#11233: an H100 held 73.9 GiB awake, 1.4 GiB asleep


def awake_bytes_per_gpu(plan: GpuPlan) -> int:
    """Bytes an engine of ``plan`` holds on each of its GPUs awake: vLLM's share, the CUDA context and the CUDA graphs
    captured outside the share (module docstring); the weights' share when the plan has no split."""
    split = plan.split
    if split is None:
        return plan.weights_bytes // max(plan.tensor_parallel_size, 1)
    return int(split.total * plan.gpu_memory_utilization) + CUDA_CONTEXT + split.cuda_graphs


def asleep_bytes_per_gpu(awake_bytes: int) -> int:
    """Bytes an engine that holds ``awake_bytes`` a GPU awake still holds there asleep (module docstring)."""
    return min(awake_bytes, ASLEEP_BYTES_PER_GPU)


class Action(StrEnum):
    SLEEP = "sleep"
    STOP = "stop"


class Verdict(StrEnum):
    """What the room says: ``fits`` (nothing to put aside), ``make`` (put aside ``steps``, allowed), ``ask`` (the
    steps need the admin's consent: a deployment whose idle policy is stay), ``wait`` (room once a residency ends or
    a request is over), ``none`` (no room: ``blockers`` say why)."""

    FITS = "fits"
    MAKE = "make"
    ASK = "ask"
    WAIT = "wait"
    NONE = "none"


@dataclass(frozen=True)
class Holder:
    """A deployment that holds GPUs. ``state``: its state in words ("ready", "loading", "asleep"...); ``ready``: it
    serves (only a ready one may be put aside); ``asleep``: it holds its residue (asleep or going to sleep);
    ``idle_seconds``: since its last request (or since it became ready, if later); ``awake_seconds``: since it became
    ready; ``policy``: its idle policy (stay, sleep, stop); ``can_sleep``: its engines were started with sleep mode;
    ``host_bytes``: host RAM a level-1 sleep copies its weights to (all its replicas)."""

    name: str
    gpus: tuple[int, ...]
    awake_bytes: int
    state: str = "ready"
    ready: bool = True
    asleep: bool = False
    idle_seconds: float = 0.0
    awake_seconds: float = 0.0
    in_flight: int = 0
    always_on: bool = False
    policy: str = "stay"
    can_sleep: bool = False
    sleep_level: int = 1
    host_bytes: int = 0

    @property
    def held(self) -> int:
        """Bytes it holds on each of its GPUs now."""
        return asleep_bytes_per_gpu(self.awake_bytes) if self.asleep else self.awake_bytes


@dataclass(frozen=True)
class Need:
    """What a deployment needs: ``bytes_per_gpu`` on each of ``gpu_count`` GPUs, on ``gpus`` exactly when given (an
    engine woken where it sleeps), else on any."""

    name: str
    bytes_per_gpu: int
    gpu_count: int
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class Box:
    """The GPUs: total bytes and bytes other processes use, by index; host RAM free now, bytes."""

    totals: dict[int, int]
    others: dict[int, int] = field(default_factory=dict)
    host_free_bytes: int = 0


@dataclass(frozen=True)
class Step:
    """One deployment put aside: ``frees`` bytes on each of ``gpus``; ``note`` why a stop stands for a sleep."""

    holder: Holder
    action: Action
    frees: int
    note: str = ""

    def words(self) -> str:
        what = "put {} to sleep" if self.action == Action.SLEEP else "stop {}"
        level = f" at level {self.holder.sleep_level}" if self.action == Action.SLEEP else ""
        note = f"; {self.note}" if self.note else ""
        return (
            f"{what.format(self.holder.name)}{level} (idle {duration_words(self.holder.idle_seconds)}, frees "
            f"{gib(self.frees)} on {gpus_words(self.holder.gpus)}{note})"
        )


@dataclass(frozen=True)
class Room:
    """The answer for ``need``: its verdict, the steps to take in order, the GPUs it would get, and what stands in
    the way (``blockers``: sentences)."""

    need: Need
    verdict: Verdict
    steps: tuple[Step, ...] = ()
    gpus: tuple[int, ...] = ()
    blockers: tuple[str, ...] = ()

    def words(self) -> str:
        """The room in one or two sentences, for the admin and the audit log."""
        need = self.need
        where = gpus_words(self.gpus) if self.gpus else f"{need.gpu_count} GPU{'s' if need.gpu_count > 1 else ''}"
        fit = f"{need.name} ({gib(need.bytes_per_gpu)} per GPU on {where})"
        if self.verdict == Verdict.FITS:
            return f"{fit} fits the free GPUs."
        if self.verdict in (Verdict.MAKE, Verdict.ASK):
            text = f"To fit {fit} {and_words([s.words() for s in self.steps])}."
            if self.verdict == Verdict.ASK:
                stay = [s.holder.name for s in self.steps if s.holder.policy == "stay"]
                them = "it" if len(stay) == 1 else "them"
                text += f" The idle policy of {and_words(stay)} is stay: only an admin's consent puts {them} aside."
            return text
        if self.verdict == Verdict.WAIT:
            return f"{fit} waits for room: {'; '.join(self.blockers)}."
        return f"No room for {fit}: {'; '.join(self.blockers) or 'not even with every other deployment put aside'}."


def make_room(need: Need, holders: Sequence[Holder], box: Box, *, residency: float, consent: bool = False) -> Room:
    """Which holders to put aside, least recently used first, so that ``need`` fits (Verdict says how it stands).
    ``holders``: every deployment that holds GPUs but the one that needs them.

    A holder may be put aside when it is ready, not always on, has no request in flight, has been awake at least
    ``residency`` seconds, and its idle policy is sleep or stop (or stay, with ``consent``); one that can sleep is
    put to sleep (a level-1 sleep only while its weights fit the host RAM left, else it is stopped), the rest are
    stopped. The steps are the fewest the least-recently-used order gives: after enough are taken, the most recently
    used of them are given back while the rest still make room.
    """
    current = _fit(need, holders, box, ())
    if current is not None:
        return Room(need, Verdict.FITS, gpus=current)
    obstacles = {h.name: _obstacle(h, residency) for h in holders}
    allowed = [h for h in holders if h.policy != "stay" or consent]
    eligible = [h for h in allowed if not obstacles[h.name][0]]
    found = _choose(need, holders, box, eligible)
    if found is not None:
        return Room(need, Verdict.MAKE, *found)
    if not consent and (found := _choose(need, holders, box, [h for h in holders if not obstacles[h.name][0]])):
        return Room(need, Verdict.ASK, *found)
    passing = [h for h in allowed if obstacles[h.name][1]]
    if _choose(need, holders, box, [*eligible, *passing]) is not None:
        return Room(need, Verdict.WAIT, blockers=tuple(f"{h.name} {obstacles[h.name][0]}" for h in passing))
    standing = [h for h in _relevant(need, holders) if obstacles[h.name][0] or h not in allowed]
    # a stay policy first: it holds when a residency has passed (a check read a residency alone as "retry in a minute")
    words = [f"{h.name} {'has the idle policy stay' if h not in allowed else obstacles[h.name][0]}" for h in standing]
    return Room(need, Verdict.NONE, blockers=tuple(words))


def _obstacle(h: Holder, residency: float) -> tuple[str, bool]:
    """Why ``h`` may not be put aside now, in words ("" when it may), and whether that passes with time (a residency
    ends, requests end)."""
    if h.asleep:
        return "", False  # nothing more to free; _choose leaves it out
    if not h.ready:
        return f"is {h.state}", False
    if h.always_on:
        return "is always on", False
    if h.in_flight:
        return f"has {h.in_flight} request{'s' if h.in_flight > 1 else ''} in flight", True
    if h.awake_seconds < residency:
        left = residency - h.awake_seconds
        awake = duration_words(h.awake_seconds)
        return f"came up {awake} ago (launched or woken) and stays up {duration_words(left)} more", True
    return "", False


def _relevant(need: Need, holders: Sequence[Holder]) -> list[Holder]:
    """The holders that stand in the way: on the needed GPUs when they are fixed, else all, awake ones."""
    awake = [h for h in holders if not h.asleep]
    return [h for h in awake if set(h.gpus) & set(need.gpus)] if need.gpus else awake


def _choose(
    need: Need, holders: Sequence[Holder], box: Box, candidates: Iterable[Holder]
) -> tuple[tuple[Step, ...], tuple[int, ...]] | None:
    """The steps (least recently used first, then pruned) and GPUs that make room, or None."""
    useful = [h for h in candidates if not h.asleep and (not need.gpus or set(h.gpus) & set(need.gpus))]
    useful.sort(key=lambda h: -h.idle_seconds)
    taken: list[Step] = []
    host_left = box.host_free_bytes
    for holder in useful:
        step = _step(holder, host_left)
        host_left -= holder.host_bytes if step.action == Action.SLEEP and holder.sleep_level == 1 else 0
        taken.append(step)
        if _fit(need, holders, box, taken) is not None:
            break
    else:
        return None
    for step in sorted(taken, key=lambda s: s.holder.idle_seconds):  # the most recently used given back first
        fewer = [s for s in taken if s is not step]
        if _fit(need, holders, box, fewer) is not None:
            taken = fewer
    gpus = _fit(need, holders, box, taken)
    return (tuple(taken), gpus) if gpus is not None else None


def _step(h: Holder, host_left: int) -> Step:
    """How ``h`` is put aside: to sleep when it can (and a level-1 copy fits ``host_left``), else stopped."""
    awake = h.awake_bytes
    if h.can_sleep and h.policy != "stop":
        if h.sleep_level != 1 or h.host_bytes <= host_left:
            return Step(h, Action.SLEEP, awake - asleep_bytes_per_gpu(awake))
        note = (
            f"a level-1 sleep would copy {gib(h.host_bytes)} of weights to host RAM, "
            f"{gib(max(host_left, 0))} is free: stopped instead"
        )
        return Step(h, Action.STOP, awake, note)
    note = "its engine was started without sleep mode: stopped instead" if h.policy == "sleep" else ""
    return Step(h, Action.STOP, awake, note)


def _fit(need: Need, holders: Sequence[Holder], box: Box, steps: Sequence[Step]) -> tuple[int, ...] | None:
    """The GPUs ``need`` gets once ``steps`` are done (empty ones first, then those an asleep deployment holds, then
    those the steps free; by index within each, as console.deployments.planning takes them), or None."""
    aside = {s.holder.name: s.action for s in steps}
    free = {i: total - box.others.get(i, 0) for i, total in box.totals.items()}
    touched: set[int] = set()
    for h in holders:
        action = aside.get(h.name)
        held = 0 if action == Action.STOP else asleep_bytes_per_gpu(h.awake_bytes) if action else h.held
        exclusive = not h.asleep and action is None
        for i in h.gpus:
            if i in free:
                free[i] = -1 if exclusive else free[i] - held
                touched |= {i} if action else set()
    resting = {i for h in holders if h.asleep for i in h.gpus}
    wanted = need.gpus or tuple(sorted(free, key=lambda i: (i in touched, i in resting, i)))
    ok = [i for i in wanted if free.get(i, -1) >= need.bytes_per_gpu]
    if need.gpus:
        return tuple(need.gpus) if len(ok) == len(need.gpus) else None
    return tuple(sorted(ok[: need.gpu_count])) if len(ok) >= need.gpu_count else None


def gib(value: int) -> str:
    """Bytes as "71.8 GiB"."""
    return f"{value / GIB:.1f} GiB"


def gpus_words(indices: Sequence[int]) -> str:
    """GPU indices in words: "GPU 2", "GPUs 0–3", "GPUs 0–3, 6", "GPUs 0, 2"."""
    ordered = sorted(set(indices))
    if len(ordered) == 1:
        return f"GPU {ordered[0]}"
    runs: list[list[int]] = []
    for i in ordered:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    parts = [f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs]
    return "GPUs " + ", ".join(parts)


def and_words(items: Sequence[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def duration_words(seconds: float) -> str:
    """``seconds`` as "45 s", "31 min", "3 h 12 min", "2 d 4 h"."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, hours, days = whole // 60, whole // 3600, whole // 86400
    if whole < 3600:
        return f"{minutes} min"
    if whole < 86400:
        return f"{hours} h {minutes % 60} min"
    return f"{days} d {hours % 24} h"
