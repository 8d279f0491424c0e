"""Engines Hearth did not launch (an OpenAI-compatible server somewhere else): their kinds, where each tells
its version and how to read it, which of the client APIs each serves itself, which metric family its /metrics
speaks, and the reading of a base URL and of a /v1/models answer. Pure: the console does the HTTP.

Where each kind tells its version:
- vLLM: ``GET /version`` → ``{"version": "0.11.0"}`` (vllm/entrypoints/openai/api_server.py);
- SGLang: ``GET /server_info`` (0.5.6+) or ``GET /get_server_info`` (0.4.0+), the top-level ``version``
  (engines.engine_version.VERSION_PATHS; the body echoes the server's arguments, its API key among them: never log it);
- llama.cpp: ``GET /props`` → ``build_info`` ("b6123-1a2b3c4", tools/server/README.md, "GET /props");
- Ollama: ``GET /api/version`` → ``{"version": "0.5.7"}`` (docs/api.md, "Version");
- a vLLM production-stack router: ``GET /version`` → ``{"version": vllm_router.__version__}``, the router's own
  version, not its engines' (vllm-project/production-stack @ 66b60661, src/vllm_router/routers/main_router.py,
  ``show_version``); so nothing that depends on a vLLM version (its own /v1/messages, /v1/responses, a metric
  mapping) is read from it;
- other OpenAI-compatible servers: nowhere known.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from engines.engine_version import VERSION_PATHS as LAUNCHED_VERSION_PATHS
from engines.engine_version import parse_version

EXTERNAL_ENGINE = "external"  # Deployment.engine of a deployment made only of engines Hearth did not launch
EXTERNAL_RUNTIME = "external"  # Replica.runtime of one such engine: no runtime starts, stops or reads it


class ExternalKind(StrEnum):
    """The engine behind an external endpoint, as the admin names it; the value is stored on the replica."""

    VLLM = "vllm"
    SGLANG = "sglang"
    LLAMA_CPP = "llama.cpp"
    OLLAMA = "ollama"
    OPENAI = "openai"
    PRODUCTION_STACK = "production-stack"  # its router; Replica.engine_kind holds up to 20 characters

    @property
    def label(self) -> str:
        return KIND_LABELS[self]


KIND_LABELS = {
    ExternalKind.VLLM: "vLLM",
    ExternalKind.SGLANG: "SGLang",
    ExternalKind.LLAMA_CPP: "llama.cpp (llama-server)",
    ExternalKind.OLLAMA: "Ollama",
    ExternalKind.OPENAI: "Other OpenAI-compatible server",
    ExternalKind.PRODUCTION_STACK: "vLLM production-stack router",
}

VERSION_PATHS: dict[ExternalKind, tuple[str, ...]] = {
    ExternalKind.VLLM: LAUNCHED_VERSION_PATHS["vllm"],
    ExternalKind.SGLANG: LAUNCHED_VERSION_PATHS["sglang"],
    ExternalKind.LLAMA_CPP: ("/props",),
    ExternalKind.OLLAMA: ("/api/version",),
    ExternalKind.OPENAI: (),
    ExternalKind.PRODUCTION_STACK: ("/version",),
}
VERSION_FIELDS = {ExternalKind.LLAMA_CPP: "build_info"}  # the rest answer {"version": ...}

# The engine family of engines.metric_mappings.ENGINE_FAMILIES each kind's /metrics speaks; "" for an unknown server
# (any family whose names it exposes). Ollama serves no Prometheus /metrics (its API is docs/api.md; no such route).
METRIC_ENGINES = {
    ExternalKind.VLLM: "vllm",
    ExternalKind.SGLANG: "sglang",
    ExternalKind.LLAMA_CPP: "llamacpp",
    ExternalKind.OPENAI: "",
}
# A production-stack router's /metrics (src/vllm_router/routers/metrics_router.py and services/metrics_service at
# 66b60661) is the router's own view: QPS, requests in prefill and decode per engine pod, average latencies, input
# and output token counts per pod, its CPU and memory. Under vllm: names, but none of the engines' KV-cache gauge,
# token counters or latency histograms (vllm:kv_cache_usage_perc, vllm:generation_tokens_total,
# vllm:time_to_first_token_seconds, ...): read as an engine's, it would mislead, so it is not scraped.
ROUTER_PANELS = (
    "A production-stack router feeds only the gateway's panels (requests, errors, latency as clients see it, "
    "tokens and cost per key): its /metrics carries none of the engines' KV-cache, throughput or engine-latency "
    "series. For those, register the engine pods (their addresses, or the chart's engine Service) as vLLM endpoints."
)
NO_METRICS = {
    ExternalKind.OLLAMA: "Ollama serves no Prometheus /metrics",
    ExternalKind.PRODUCTION_STACK: ROUTER_PANELS,
}
PANELS = {ExternalKind.PRODUCTION_STACK: ROUTER_PANELS}  # what a kind's panels can show, where it is not all of them

# vLLM serves Anthropic's /v1/messages from 0.11 (engines.launch.ANTHROPIC_ENGINES) and OpenAI's /v1/responses
# from 0.10.0 (vllm-project/vllm#20504, closing #14721). The other kinds get the gateway's translation to chat
# completions, which every OpenAI-compatible server serves: SGLang for the reasons engines.launch gives; llama.cpp
# and Ollama added their own /v1/messages only in late-2025 releases, and a build's number says too little.
ANTHROPIC_FROM = {ExternalKind.VLLM: "0.11.0"}
RESPONSES_FROM = {ExternalKind.VLLM: "0.10.0"}


def _at_least(version: str, floor: str | None) -> bool:
    if floor is None:
        return False
    try:
        return parse_version(version.split("+", 1)[0]) >= parse_version(floor)
    except ValueError:
        return False  # no version read: translate, which works everywhere


def speaks_anthropic(kind: str, version: str) -> bool:
    """Whether the endpoint serves /v1/messages itself (else the gateway translates to chat completions)."""
    return _at_least(version, ANTHROPIC_FROM.get(ExternalKind(kind)))


def speaks_responses(kind: str, version: str) -> bool:
    """Whether the endpoint serves /v1/responses itself (else the gateway translates to chat completions)."""
    return _at_least(version, RESPONSES_FROM.get(ExternalKind(kind)))


def panels_fed(kind: str) -> str:
    """Which panels an endpoint of ``kind`` can feed, in words, where it is not all of them ("" otherwise)."""
    return PANELS.get(ExternalKind(kind), "")


def version_in(kind: str, body: object) -> str:
    """The version string in the answer of one of VERSION_PATHS[kind]; "" when it holds none (at most 50
    characters, as Deployment.engine_version holds)."""
    value = body.get(VERSION_FIELDS.get(ExternalKind(kind), "version")) if isinstance(body, Mapping) else None
    return value.strip()[:50] if isinstance(value, str) else ""


def base_url_of(text: str) -> str:
    """The endpoint's base URL as Hearth keeps it: ``scheme://host[:port][/path]`` without a trailing "/" or
    "/v1" (the OpenAI API lives below ``/v1``, an engine's own routes below the root).

    Raises ValueError, in words for the admin, for what is not an http(s) URL with a host, or carries a user
    and password (they would show wherever the URL does: give the key in its own field), a query or a fragment.
    """
    text = text.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a URL: {exc}.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{text!r} is not an http:// or https:// URL with a host (e.g. http://10.0.0.5:8000).")
    if parts.username is not None or parts.password is not None:
        raise ValueError("Give the engine API key in its own field, not in the URL.")
    if parts.query or parts.fragment:
        raise ValueError(f"{text!r} has a query or fragment; give the server's base URL only.")
    path = parts.path.rstrip("/").removesuffix("/v1").rstrip("/")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}{f':{port}' if port is not None else ''}{path}"


@dataclass(frozen=True)
class Listed:
    """One model of a /v1/models answer: its id and, where the engine says it (vLLM, SGLang), max_model_len."""

    id: str
    max_model_len: int = 0


def models_listed(body: object) -> list[Listed]:
    """The models of a ``GET /v1/models`` answer, OpenAI's ``{"object": "list", "data": [{"id": ...}]}``.

    Raises ValueError when the answer is not that list (what an endpoint that is not OpenAI-compatible sends).
    """
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list) or not all(isinstance(m, Mapping) and isinstance(m.get("id"), str) for m in data):
        raise ValueError("its GET /v1/models answer is not OpenAI's model list, {'data': [{'id': ...}]}")
    out = []
    for model in data:
        length = model.get("max_model_len")
        out.append(Listed(model["id"], length if isinstance(length, int) and not isinstance(length, bool) else 0))
    return out
