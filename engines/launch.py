"""Launch specs: the pure description of how to start one engine replica.

A runtime (appliance.runtimes) turns a LaunchSpec into a subprocess or a container; nothing here
starts anything.
"""

from dataclasses import dataclass, field
from enum import StrEnum


class EngineKind(StrEnum):
    """The engines Hearth can launch; the value is stored on the deployment."""

    VLLM_CPU = "vllm-cpu"
    SGLANG_CPU = "sglang-cpu"
    SIMULATOR = "simulator"
    VLLM = "vllm"
    SGLANG = "sglang"

    @property
    def label(self) -> str:
        return ENGINE_LABELS[self]


ENGINE_LABELS = {
    EngineKind.VLLM_CPU: "vLLM (CPU)",
    EngineKind.SGLANG_CPU: "SGLang (CPU)",
    EngineKind.SIMULATOR: "Simulator (demo, on the GPU inventory)",
    EngineKind.VLLM: "vLLM (GPU, container)",
    EngineKind.SGLANG: "SGLang (GPU, container)",
}

# Engines planned with engines.planner on the GPU inventory.
GPU_ENGINES = frozenset({EngineKind.SIMULATOR, EngineKind.VLLM, EngineKind.SGLANG})
# Engines that run only as containers on real GPUs (their images hold CUDA builds).
CONTAINER_ONLY_ENGINES = frozenset({EngineKind.VLLM, EngineKind.SGLANG})
# Engines planned with engines.sizing.plan_cpu from a KV budget in GiB, run as local processes.
CPU_ENGINES = frozenset({EngineKind.VLLM_CPU, EngineKind.SGLANG_CPU})
# SGLang, as a container or a local CPU process: its /metrics names (engines.metric_mappings "sglang" mapping) and its
# version at GET /server_info (engines.engine_version.VERSION_PATHS["sglang"]).
SGLANG_ENGINES = frozenset({EngineKind.SGLANG, EngineKind.SGLANG_CPU})
# Engines whose /v1/messages Hearth relays as it is (vLLM since 0.11). SGLang serves one too from 0.5.9
# (sglang/srt/entrypoints/http_server.py; 0.5.8 has none), but only behind "Authorization: Bearer" and
# not on every release Hearth launches (its floor is 0.4.0), so the gateway translates for SGLang.
ANTHROPIC_ENGINES = frozenset({EngineKind.VLLM_CPU, EngineKind.SIMULATOR, EngineKind.VLLM})


# Engines that serve OpenAI's /v1/responses themselves: vLLM (vllm/entrypoints/openai/responses/, read in the
# 0.32.0 wheel), the simulator as vLLM 0.32 does. SGLang's /v1/responses
# (python/sglang/srt/entrypoints/openai/serving_responses.py) was built around gpt-oss's harmony format and
# its support for other models could not be confirmed from its source at hand, so the gateway translates to
# its chat API, which every model serves.
RESPONSES_ENGINES = frozenset({EngineKind.VLLM_CPU, EngineKind.SIMULATOR, EngineKind.VLLM})


def speaks_responses(engine: str, extra_args: list[str]) -> bool:
    """Whether the engine serves OpenAI's /v1/responses itself; the simulator can pretend not to
    (``--no-responses``), and the gateway translates for engines that don't."""
    return engine in RESPONSES_ENGINES and "--no-responses" not in extra_args


def speaks_anthropic(engine: str, extra_args: list[str]) -> bool:
    """Whether Hearth relays Anthropic's /v1/messages to the engine as it is (vLLM, since 0.11) rather
    than translating it to chat completions (SGLang: see ANTHROPIC_ENGINES).

    The simulator can pretend not to (``--no-anthropic``); the gateway translates for engines that don't.
    """
    return engine in ANTHROPIC_ENGINES and "--no-anthropic" not in extra_args


def image_version(image: str) -> str:
    """The engine version an image's tag names: ``vllm/vllm-openai:v0.11.0`` → ``v0.11.0``,
    ``lmsysorg/sglang:v0.5.19-cu129`` → ``v0.5.19`` (a digest after ``@`` is ignored)."""
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[-1] if ":" in name.rsplit("/", 1)[-1] else ""
    return tag.split("-", 1)[0]


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one replica.

    ``program`` is what runs the engine as a local process (a container runs its image's entrypoint
    instead) and ``args`` the engine's arguments; ``host`` and ``port`` where the engine listens;
    ``api_key`` the per-launch secret the engine demands and only the gateway knows; ``image`` the
    container image; ``mounts`` host path → container path, bound read-only (the model folder);
    ``gpu_indices`` the GPUs a container is given (empty: none, as on a simulated inventory);
    ``labels`` what the container is tagged with; ``added_flags`` the flags Hearth chose (the rest came
    from the user).
    """

    engine: EngineKind
    program: list[str]
    args: list[str]
    env: dict[str, str]
    host: str
    port: int
    api_key: str
    served_model_name: str
    image: str = ""
    mounts: dict[str, str] = field(default_factory=dict)
    gpu_indices: tuple[int, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    metrics_path: str = "/metrics"
    added_flags: list[str] = field(default_factory=list)

    @property
    def argv(self) -> list[str]:
        """The local process's full command line."""
        return [*self.program, *self.args]
