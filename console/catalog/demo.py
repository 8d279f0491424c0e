"""The demo catalog: published model configurations with their real checkpoint sizes and where each came from
(``demo/<name>.json``), to plan and simulate where no weights can be had: demo mode, a box that cannot reach
Hugging Face.

Each file holds ``model`` (the Hugging Face repo id), ``config`` (its config.json), ``total_size`` (checkpoint
bytes), ``total_size_kind`` (how those bytes were got, SIZE_KINDS), ``total_size_source`` and ``config_source``
(citations), and ``notes``. tests/test_model_table.py checks every file's KV bytes per token and weight bytes.
"""

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.modelconfig import ModelConfig, parse_config

DEMO_DIR = Path(__file__).parent / "demo"

SIZE_KINDS = {
    "index": "total_size in its model.safetensors.index.json",
    "safetensors-header": "summed from its safetensors headers",
    "derived-from-parameter-count": "its published parameter counts × bytes per dtype",
    "same-tensors-as": "the published bytes of a checkpoint with the same tensors",
    "derived-from-config": "derived from config.json's shapes, checked against published sibling figures",
    "derived-from-config-unconfirmed": "derived from config.json's shapes (no published figure to check)",
}


@dataclass(frozen=True)
class DemoModel:
    """One catalog entry. ``name`` is the file's stem (the model's name once added); ``weights_bytes`` the
    checkpoint's bytes as published; ``size_how`` SIZE_KINDS' words for how those bytes were got."""

    name: str
    repo_id: str
    config: dict[str, Any]
    weights_bytes: int
    size_how: str
    size_source: str
    config_source: str
    notes: str

    @property
    def facts(self) -> ModelConfig:
        return parse_config(self.config)

    @property
    def shape(self) -> str:
        """The architecture in a few words: "dense", "MoE, 8 experts (2 active)", "… MLA", "hybrid (12 of 48
        layers attention)", "… sliding window"."""
        facts = self.facts
        words = [f"MoE, {facts.num_experts} experts ({facts.num_experts_per_tok} active)"] if facts.num_experts else []
        layers = facts.layers
        if layers.state:
            words.append(f"hybrid ({layers.attention} of {layers.attention + layers.state} layers attention)")
        if facts.is_mla:
            words.append("MLA")
        if layers.sliding:
            words.append(f"sliding window on {layers.sliding} of {layers.attention} layers")
        return ", ".join(words) or "dense"


def _read(path: Path) -> DemoModel:
    raw = json.loads(path.read_text())
    return DemoModel(
        name=path.stem,
        repo_id=raw["model"],
        config=raw["config"],
        weights_bytes=int(raw["total_size"]),
        size_how=SIZE_KINDS[raw["total_size_kind"]],
        size_source=raw["total_size_source"],
        config_source=raw["config_source"],
        notes=raw.get("notes", ""),
    )


@functools.cache
def demo_models() -> tuple[DemoModel, ...]:
    """Every entry, by name."""
    return tuple(_read(path) for path in sorted(DEMO_DIR.glob("*.json")))


def demo_model(name: str) -> DemoModel | None:
    """The entry called ``name`` (a file stem, e.g. ``llama-3.1-70b``) or whose Hugging Face repo id it is, in any
    case (``Qwen/Qwen3-0.6B``, as the Models page shows it), or None."""
    return next((m for m in demo_models() if name == m.name or name.lower() == m.repo_id.lower()), None)
