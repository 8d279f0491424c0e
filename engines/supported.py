"""The engine releases Hearth supports: those its adapters (engines.adapters), flag rules and dumped argument parsers
(engines/argspecs/), metric maps (engines.metric_mappings) and measurements were written and tested against, and the
registry image of each that the Docker runtime launches by default.

appliance.settings takes HEARTH_IMAGE_VLLM's and HEARTH_IMAGE_SGLANG's defaults from here; README's "On a GPU server"
names the same images (tests/test_compose_health.py holds the three together, and checks each release has its
parser dump). Another image may be set; its flags are then read through the nearest dumped parser
(engines.argspec.load), untested. Images are pinned by tag: a launch pins the image it pulled to its digest for every
restart (appliance.runtimes.docker, console.deployments.lifecycle). SGLang's ``-cu129`` tags are its CUDA 12.9 builds
(its ``-cu130`` ones need a CUDA 13 driver).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class SupportedEngine:
    """One supported release: ``version`` as the engine reports it (vLLM's ``GET /version``, SGLang's
    ``/server_info``) and ``image`` the registry image that runs it, by tag."""

    version: str
    image: str


SUPPORTED_ENGINES = {
    "vllm": SupportedEngine("0.32.0", "vllm/vllm-openai:v0.32.0"),
    "sglang": SupportedEngine("0.5.15.post1", "lmsysorg/sglang:v0.5.15.post1-cu129"),
}
