"""The Docker runtime: engines as containers, through the docker SDK.

First cut (the full lifecycle is issue 5): one container per replica, named and labelled
``hearth.replica=<name>``, on the internal network ``HEARTH_DOCKER_NETWORK``, no port published on
the host. The spec's argv runs as the container's command in ``spec.image``.
"""

import docker
from django.conf import settings
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from appliance.runtimes.base import RuntimeError_, RuntimeStatus
from engines.launch import LaunchSpec


class DockerRuntime:
    name = "docker"

    def __init__(self) -> None:
        try:
            self.client = docker.from_env()
        except DockerException as exc:
            raise RuntimeError_(f"Docker is not reachable: {exc}") from None

    def start(self, name: str, spec: LaunchSpec) -> str:
        if not spec.image:
            raise RuntimeError_(f"the {spec.engine.label} engine has no container image")
        try:
            container = self.client.containers.run(
                spec.image,
                command=spec.argv,
                name=name,
                detach=True,
                environment=spec.env,
                labels={"hearth.replica": name},
                network=settings.HEARTH_DOCKER_NETWORK,
            )
        except ImageNotFound:
            raise RuntimeError_(f"image {spec.image} is not present and no registry is reachable") from None
        except APIError as exc:
            raise RuntimeError_(f"Docker refused to start {name}: {exc.explanation}") from None
        return str(container.id)

    def status(self, name: str) -> RuntimeStatus:
        try:
            state = self.client.containers.get(name).attrs["State"]
        except NotFound:
            return RuntimeStatus(running=False)
        if state.get("Running"):
            return RuntimeStatus(running=True)
        return RuntimeStatus(running=False, exit_code=state.get("ExitCode"), oom_killed=state.get("OOMKilled"))

    def stop(self, name: str, grace_seconds: float = 10.0) -> RuntimeStatus:
        try:
            container = self.client.containers.get(name)
        except NotFound:
            return RuntimeStatus(running=False)
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
