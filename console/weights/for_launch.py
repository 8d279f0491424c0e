"""The weights step of a launch (console.deployments.launching): a Hugging Face model's files downloaded into the
weights cache before its engine starts, the progress written where the deployment's page reads it, and what the
engine is told so that it reads the cache: a local process gets the snapshot folder; a container gets the repo id and
``--revision <sha>`` as before and finds the files in the weights volume it shares with the worker (huggingface_hub
returns a cached file for a commit sha without asking the hub, file_download.py ``_hf_hub_download_to_cache_dir``)."""

import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from console.catalog.models import ModelSource
from console.weights import progress as progress_store
from console.weights.fetching import WeightsError, fetch_model, snapshot_dir
from console.weights.progress import Progress
from engines.launch import EngineKind

WEIGHTLESS_ENGINES = frozenset({EngineKind.SIMULATOR})  # it reads a model's config, never its weights
REPORT_EVERY = 1.0  # seconds between progress writes (each also the launch's heartbeat), at most
REPORT_SHARE = 0.01  # or after this share of the bytes (0–1): a fast download is not shown a second late


class LaunchMovedOn(WeightsError):
    """The deployment left the state the download was for (stopped, deleted): the download stops there."""


def needs_download(source: ModelSource, engine: str) -> bool:
    """Whether a launch of ``source`` on ``engine`` downloads weights first: a Hugging Face model pinned to a
    commit, on an engine that loads weights."""
    return source.kind == ModelSource.Kind.HF and bool(source.revision) and engine not in WEIGHTLESS_ENGINES


def download(deployment_id: int, source: ModelSource, heartbeat: Callable[[str], bool]) -> None:
    """Download ``source``'s files at its pinned revision, writing the progress (console.weights.progress) and
    calling ``heartbeat`` with its words every REPORT_EVERY seconds or REPORT_SHARE of the bytes; the record is gone
    when this returns.
    Raises LaunchMovedOn when ``heartbeat`` says the deployment moved on, WeightsError when the download failed."""
    last = [float("-inf"), -1]  # when, and at how many bytes done, the progress was last written

    def report(progress: Progress) -> None:
        moved = progress.done - last[1] >= progress.total * REPORT_SHARE or progress.done >= progress.total
        if time.monotonic() - last[0] < REPORT_EVERY and not moved:
            return
        last[:] = [time.monotonic(), progress.done]
        progress_store.record(deployment_id, progress)
        if not heartbeat(progress.words()):
            raise LaunchMovedOn(f"The deployment moved on while the weights of {source.repo_id} downloaded.")

    try:
        fetch_model(source.repo_id, source.revision, report)
    finally:
        progress_store.clear(deployment_id)


def local_model(source: ModelSource, engine: str) -> str:
    """The snapshot folder a local engine process is given for ``source`` (its weights downloaded before it
    started), "" when the engine reads the model some other way (a local folder, the simulator, a container)."""
    return str(snapshot_dir(source.repo_id, source.revision)) if needs_download(source, engine) else ""


def in_weights_volume(path: str) -> str:
    """Where a container engine finds ``path`` (a local model's folder) when it is inside the weights cache (an
    archive imported by console.weights.archives): the same place in the weights volume, which every engine mounts
    at appliance.runtimes.docker.WEIGHTS_CACHE and the worker at HEARTH_WEIGHTS_DIR; "" for a folder elsewhere."""
    from appliance.runtimes.docker import WEIGHTS_CACHE  # the docker SDK, imported only where containers are

    folder, cache = Path(path), Path(settings.HEARTH_WEIGHTS_DIR)
    return str(Path(WEIGHTS_CACHE) / folder.relative_to(cache)) if folder.is_relative_to(cache) else ""
