"""Launch specs: the pure description of how to start one engine replica.

A runtime (appliance.runtimes) turns a LaunchSpec into a subprocess or a container; nothing here
starts anything.
"""

from dataclasses import dataclass, field
from enum import StrEnum


class EngineKind(StrEnum):
    """The engines Hearth can launch; the value is stored on the deployment."""

    VLLM_CPU = "vllm-cpu"
    SIMULATOR = "simulator"

    @property
    def label(self) -> str:
        return ENGINE_LABELS[self]


ENGINE_LABELS = {EngineKind.VLLM_CPU: "vLLM (CPU)", EngineKind.SIMULATOR: "Simulator (demo, on the GPU inventory)"}

GPU_ENGINES = frozenset({EngineKind.SIMULATOR})  # engines planned with engines.planner on the GPU inventory


def speaks_anthropic(engine: str, extra_args: list[str]) -> bool:
    """Whether the engine serves Anthropic's /v1/messages itself (vLLM does since 0.11; SGLang does not).

    The simulator can pretend not to (``--no-anthropic``); the gateway translates for engines that don't.
    """
    return engine in {EngineKind.VLLM_CPU, EngineKind.SIMULATOR} and "--no-anthropic" not in extra_args


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one replica.

    ``argv`` is the full command (argv[0] the program); ``port`` the TCP port the engine listens on;
    ``api_key`` the per-launch secret the engine demands and only the gateway knows; ``image`` the
    container image (the Docker runtime needs one); ``added_flags`` the flags Hearth chose (the rest
    came from the user).
    """

    engine: EngineKind
    argv: list[str]
    env: dict[str, str]
    host: str
    port: int
    api_key: str
    served_model_name: str
    image: str | None = None
    health_path: str = "/health"
    metrics_path: str = "/metrics"
    added_flags: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"
