"""The Docker runtime: engines as containers, through the docker SDK (docker-py 7).

One container per replica, named by Hearth (``hearth-1a2b3c-replica-12``) and labelled
``hearth.replica``, ``hearth.deployment`` and ``hearth.instance`` (HEARTH_INSTANCE: which appliance
owns it). It joins the bridge network HEARTH_DOCKER_NETWORK and the gateway reaches it at its address
there: no port is published on the host. The image's entrypoint runs the engine with
``spec.args``; the GPUs are a device request for exactly ``spec.gpu_indices`` (what ``docker run
--gpus '"device=0,1"'`` asks of the NVIDIA container runtime); every engine shares the weights-cache
volume HEARTH_WEIGHTS_VOLUME at /root/.cache/huggingface, and HF_TOKEN comes from HEARTH_HF_TOKEN_FILE.
Local images made by scripts/build-engine-images.sh name, in the label ``hearth.host-binds``, the host
paths their programs live in; those are bound read-only. Registry images have no such label.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
from django.conf import settings
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import DeviceRequest

from appliance.runtimes.base import RuntimeError_, RuntimeStatus, Started
from engines.launch import LaunchSpec

LABEL_REPLICA = "hearth.replica"
LABEL_DEPLOYMENT = "hearth.deployment"
LABEL_INSTANCE = "hearth.instance"
LABEL_HOST_BINDS = "hearth.host-binds"
WEIGHTS_CACHE = "/root/.cache/huggingface"  # HF_HOME's default inside vLLM's and SGLang's images


@dataclass
class PullProgress:
    """What a ``docker pull`` has done so far, from the daemon's JSON progress events (one per layer
    step: ``{"id": layer, "status": "Downloading", "progressDetail": {"current": bytes, "total":
    bytes}}``, then "Download complete", "Extracting", "Pull complete"; "Already exists" for a cached
    layer), in words for the console."""

    image: str
    layers: dict[str, tuple[int, int]] = field(default_factory=dict)  # id → (downloaded, total) bytes
    done: set[str] = field(default_factory=set)

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one event. Raises RuntimeError_ for the daemon's error event (registry unreachable...)."""
        if "error" in event:
            raise RuntimeError_(f"Could not pull {self.image}: {event['error']}")
        layer, status = event.get("id"), str(event.get("status", ""))
        if not layer or status.startswith(("Pulling from", "Digest:", "Status:")):
            return  # image-level lines, not a layer's
        detail = event.get("progressDetail") or {}
        if status == "Downloading" and detail.get("total"):
            self.layers[layer] = (int(detail.get("current", 0)), int(detail["total"]))
        elif status in {"Pulling fs layer", "Waiting"}:
            self.layers.setdefault(layer, (0, 0))
        elif status in {"Download complete", "Pull complete", "Already exists"}:
            total = self.layers.get(layer, (0, 0))[1]
            self.layers[layer] = (total, total)
            if status != "Download complete":
                self.done.add(layer)

    def words(self) -> str:
        """E.g. ``Pulling vllm/vllm-openai:v0.11.0: 3.2 of 9.8 GiB, 5 of 12 layers done.`` (GiB: 2^30 bytes, as
        the console gives every size)."""
        current = sum(c for c, _ in self.layers.values()) / 2**30
        total = sum(t for _, t in self.layers.values()) / 2**30
        return (
            f"Pulling {self.image}: {current:.1f} of {total:.1f} GiB, "
            f"{len(self.done)} of {len(self.layers)} layers done."
        )


def container_config(name: str, spec: LaunchSpec, image_labels: Mapping[str, str]) -> dict[str, Any]:
    """The keyword arguments of ``client.containers.create`` for ``spec`` (pure, so it is table-tested).

    Never ``ports``: the engine is reached on HEARTH_DOCKER_NETWORK only.
    """
    binds = [p for p in image_labels.get(LABEL_HOST_BINDS, "").split(",") if p]
    volumes: dict[str, dict[str, str]] = {path: {"bind": path, "mode": "ro"} for path in binds}
    volumes |= {host: {"bind": inside, "mode": "ro"} for host, inside in spec.mounts.items()}
    volumes[settings.HEARTH_WEIGHTS_VOLUME] = {"bind": WEIGHTS_CACHE, "mode": "rw"}
    env = dict(spec.env)
    token_file = settings.HEARTH_HF_TOKEN_FILE
    token = Path(token_file).read_text().strip() if token_file and Path(token_file).is_file() else ""
    if token:  # compose's secret file is empty while there is no token: then none is given
        env["HF_TOKEN"] = token
    config: dict[str, Any] = {
        "image": spec.image,
        "command": spec.args,
        "name": name,
        "environment": env,
        "labels": {**spec.labels, LABEL_REPLICA: name, LABEL_INSTANCE: settings.HEARTH_INSTANCE},
        "network": settings.HEARTH_DOCKER_NETWORK,
        "volumes": volumes,
        "shm_size": settings.HEARTH_ENGINE_SHM_SIZE,
        "detach": True,
    }
    if spec.gpu_indices:
        ids = [str(i) for i in spec.gpu_indices]
        config["device_requests"] = [DeviceRequest(driver="nvidia", device_ids=ids, capabilities=[["gpu"]])]
    return config


class DockerRuntime:
    name = "docker"

    def __init__(self) -> None:
        try:
            self.client = docker.from_env()
            self.client.ping()
        except DockerException as exc:
            raise RuntimeError_(f"Docker is not reachable: {exc}") from None

    def prepare(self, spec: LaunchSpec, progress: Callable[[str], None]) -> str:
        if not spec.image:
            raise RuntimeError_(f"the {spec.engine.label} engine has no container image")
        try:
            image = self.client.images.get(spec.image)
        except ImageNotFound:
            self._pull(spec.image, progress)
            image = self.client.images.get(spec.image)
        except APIError as exc:
            raise RuntimeError_(f"Docker could not read image {spec.image}: {exc.explanation}") from None
        digests: list[str] = image.attrs.get("RepoDigests") or []
        return digests[0] if digests else str(image.id)  # a local image has no registry digest, only its id

    def _pull(self, image: str, progress: Callable[[str], None]) -> None:
        state = PullProgress(image)
        try:  # docker-py splits the reference: a tag, a digest ("repo@sha256:…") or neither (latest)
            events: Iterable[Mapping[str, Any]] = self.client.api.pull(image, stream=True, decode=True)
            for event in events:
                state.feed(event)
                progress(state.words())
        except APIError as exc:
            raise RuntimeError_(f"Could not pull {image}: {exc.explanation}") from None

    def start(self, name: str, spec: LaunchSpec) -> Started:
        try:
            existing = self.client.containers.get(name)
        except NotFound:
            existing = None
        if existing is not None and existing.status == "running":  # a worker died after starting it: adopt it
            return self._started(existing, spec)
        if existing is not None:
            existing.remove(force=True)  # an earlier run's exited container; its logs were read before
        self._ensure_network()
        try:
            labels = self.client.images.get(spec.image).labels or {}
            container = self.client.containers.create(**container_config(name, spec, labels))
        except ImageNotFound:
            raise RuntimeError_(f"image {spec.image} is not present and could not be pulled") from None
        except APIError as exc:
            raise RuntimeError_(f"Docker refused to create {name}: {exc.explanation}") from None
        try:
            container.start()
        except APIError as exc:
            container.remove(force=True)  # never leave a created-but-dead container behind
            raise RuntimeError_(f"Docker could not start {name}: {exc.explanation}") from None
        container.reload()
        return self._started(container, spec)

    def _started(self, container: Any, spec: LaunchSpec) -> Started:
        address = container.attrs["NetworkSettings"]["Networks"][settings.HEARTH_DOCKER_NETWORK]["IPAddress"]
        return Started(str(container.id), address, spec.port)

    def _ensure_network(self) -> None:
        network = settings.HEARTH_DOCKER_NETWORK
        if not self.client.networks.list(names=[network]):
            self.client.networks.create(network, driver="bridge", labels={"hearth": "engines"})

    def status(self, name: str) -> RuntimeStatus:
        try:
            state = self.client.containers.get(name).attrs["State"]
        except NotFound:
            return RuntimeStatus(running=False)
        if state.get("Running"):
            return RuntimeStatus(running=True)
        return RuntimeStatus(running=False, exit_code=state.get("ExitCode"), oom_killed=bool(state.get("OOMKilled")))

    def stop(self, name: str, grace_seconds: float = 10.0) -> RuntimeStatus:
        try:
            container = self.client.containers.get(name)
        except NotFound:
            return RuntimeStatus(running=False)
        if container.status == "running":
            container.stop(timeout=int(grace_seconds))
        status = self.status(name)
        container.remove(force=True)
        return status

    def logs(self, name: str, lines: int = 50) -> str:
        try:
            raw: bytes = self.client.containers.get(name).logs(tail=lines)
        except NotFound:
            return ""
        return raw.decode("utf-8", "replace")

    def names(self) -> set[str]:
        mine = [LABEL_REPLICA, f"{LABEL_INSTANCE}={settings.HEARTH_INSTANCE}"]
        # the SDK inspects each container it lists: one removed in between is left out, not a NotFound
        listed = self.client.containers.list(all=True, filters={"label": mine}, ignore_removed=True)
        return {str(c.name) for c in listed}
