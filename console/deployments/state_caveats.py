"""What a deployment's page adds to its state when nothing moves it on or checks it: no worker running to take the
stop, launch, sleep or wake it waits for (the long tasks' worker for a launch before its engine starts, the upkeep
worker for the rest: appliance.celery_queues), or to check its engine; a launch waiting its turn for the long-task
worker; Celery beat stopped, so the state has not been checked since (appliance.celery_heartbeats). The state is
what was last seen; these say how far to trust it."""

from dataclasses import dataclass

from appliance.celery_heartbeats import Liveness
from console.deployments.models import Deployment, DeploymentState
from engines.room import duration_words

S = DeploymentState
WAITING_ON_A_WORKER = {  # states a worker's task moves on, what waits for it, and whether the long tasks' worker
    S.PENDING: ("this launch", True),  # takes it (appliance.celery_queues) or the upkeep worker
    S.PULLING: ("this launch", True),
    S.STARTING: ("this launch", True),
    S.LOADING: ("this launch", False),  # the health polls
    S.STOPPING: ("this stop", False),
    S.SLEEPING: ("this sleep", False),
    S.WAKING: ("this wake", False),
}
CHECKED = (S.READY, S.ASLEEP, *WAITING_ON_A_WORKER)  # states reconcile and the scraper check every few seconds


@dataclass(frozen=True)
class Caveat:
    """One sentence for the page and the API; ``kind`` names it ("no-worker", "queued", "monitoring-stopped",
    "liveness-unknown")."""

    kind: str
    words: str


def caveats(dep: Deployment, found: Liveness) -> list[Caveat]:
    """What ``dep``'s page should add to its state, given the heartbeats ``found``; none for a stopped or failed
    deployment (nothing is under way, and nothing needs checking)."""
    if dep.state not in CHECKED:
        return []
    if found.unreadable:
        return [Caveat("liveness-unknown", f"Cannot tell whether a worker and beat run: {found.unreadable}.")]
    out = []
    what, long = WAITING_ON_A_WORKER.get(S(dep.state), ("", False))
    if no_worker := found.long_worker_stopped() if long else found.worker_stopped():
        if what:
            asked = duration_words(max(0.0, found.now - dep.state_since.timestamp()))
            words = f"No worker is taking {what} (asked {asked} ago): {no_worker}. It goes on once a worker runs."
        else:
            words = f"No worker is running, so nothing checks this engine: {no_worker}."
        out.append(Caveat("no-worker", words))
    elif dep.state == S.PENDING and found.long_waiting:
        waiting = "1 task waits" if found.long_waiting == 1 else f"{found.long_waiting} tasks wait"
        words = (
            f"The long-task worker is busy: {waiting} in its queue for a free process (a launch, a batch run or a"
            " capacity check holds one while it runs). This launch starts when its turn comes."
        )
        out.append(Caveat("queued", words))
    if no_beat := found.beat_stopped():
        out.append(Caveat("monitoring-stopped", f"Monitoring stopped: {no_beat}; this state is not checked meanwhile."))
    return out
