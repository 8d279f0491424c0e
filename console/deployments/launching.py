"""A launch, step by step: pending → pulling → starting → loading, each step claimed with a conditional
update (Deployment.move), each step's progress its heartbeat (reconcile resumes a launch silent for
HEARTH_STALE_AFTER seconds, from the step it was in). Loading replicas are handed to watching.watch.
"""

import logging
import time
from pathlib import Path

from appliance.runtimes import RuntimeError_, get_runtime
from console.catalog.models import ModelSource
from console.deployments import dispatch
from console.deployments.changes import replan_on_free_gpus
from console.deployments.lifecycle import converge, end_all, image_ref, prepare
from console.deployments.models import Deployment, DeploymentState
from console.deployments.planning import gpus_in_words
from console.weights.fetching import WeightsError
from console.weights.for_launch import LaunchMovedOn, download, needs_download
from engines.launch import GPU_ENGINES

log = logging.getLogger(__name__)
S = DeploymentState
WATCH_EVERY = 2.0  # seconds between health polls of a loading replica
PREPARING = "Preparing the engine image."
PREPARING_PROCESS = "Preparing the engine: no image to pull, it runs as a local process."
LOADING = "The engine is starting: loading its weights, then warming up"  # then "." or "(N s so far)."


def launch(deployment_id: int) -> None:
    """pending → pulling: check the model is still there and its GPUs free, then pull."""
    dep = Deployment.objects.filter(pk=deployment_id).select_related("model").first()
    if dep is None or dep.state != S.PENDING:
        return
    if dep.source.kind == ModelSource.Kind.LOCAL and not Path(dep.source.path).is_dir():
        dep.move(S.FAILED, f"The model folder {dep.source.path} is gone; add the model again.")
        return
    if refused := replan_on_free_gpus(dep):
        dep.move(S.FAILED, refused)
        return
    if dep.move(S.PULLING, PREPARING if get_runtime().name == "docker" else PREPARING_PROCESS):
        pull(dep)


def resume(deployment_id: int) -> None:
    """Carry on a launch whose worker died (reconcile claimed it): pulling or starting, from where it was."""
    dep = Deployment.objects.filter(pk=deployment_id).select_related("model").first()
    if dep is not None and dep.state == S.PULLING:
        pull(dep)
    elif dep is not None and dep.state == S.STARTING:
        start(dep)


def pull(dep: Deployment) -> None:
    """pulling → starting, the pull's progress written every second (it is also the launch's heartbeat); then a
    Hugging Face model's weights downloaded into the weights cache (console.weights), resuming what an earlier try
    left, its progress written the same way."""
    last = [0.0]

    def progress(words: str) -> None:
        if time.monotonic() - last[0] >= 1.0:
            last[0] = time.monotonic()
            dep.progress(words)

    try:
        pinned = prepare(dep, progress)
    except RuntimeError_ as exc:
        dep.move(S.FAILED, str(exc))
        return
    if needs_download(dep.source, dep.engine):
        try:
            download(dep.pk, dep.source, dep.progress)
        except LaunchMovedOn:
            return
        except WeightsError as exc:
            dep.move(S.FAILED, str(exc))
            return
    gpus = gpus_in_words(dep.stored_plan) if dep.engine in GPU_ENGINES else "CPU"
    ref = image_ref(dep) if pinned else ""
    if dep.move(S.STARTING, "Starting the engine.", gpu_model=gpus[:100], engine_image=pinned, engine_image_ref=ref):
        start(dep)


def start(dep: Deployment) -> None:
    """starting → loading: start or adopt every replica (a second run after a worker died starts none twice)."""
    try:
        replicas = converge(dep)
    except RuntimeError_ as exc:
        end_all(dep)
        dep.move(S.FAILED, str(exc))
        return
    log.info("deployment %s: started %s", dep.name, ", ".join(r.runtime_name for r in replicas))
    if dep.move(S.LOADING, f"{LOADING}."):
        for replica in replicas:
            dispatch.send(dispatch.WATCH_REPLICA, replica.pk, countdown=WATCH_EVERY)
