"""Model facts read from a checkpoint folder: config.json and the safetensors headers.

Weight bytes are the checkpoint's real tensor bytes, summed from each safetensors header's
``data_offsets`` (format: 8-byte little-endian header length, then a JSON header;
https://github.com/huggingface/safetensors#format), never parameters x dtype from a table.
"""

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HEADER_LEN_BYTES = 8
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit on header size

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


class ModelConfigError(ValueError):
    """The folder is not a usable checkpoint; the message says what is missing or malformed."""


@dataclass(frozen=True)
class ModelConfig:
    """The attention geometry sizing needs, from config.json.

    head_dim is config's explicit ``head_dim`` when present, else hidden_size / num_attention_heads.
    """

    architecture: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_size: int
    max_position_embeddings: int
    torch_dtype: str


def parse_config(raw: dict[str, Any]) -> ModelConfig:
    """Read a config.json dict (a multimodal model's nested ``text_config`` wins).

    Raises ModelConfigError naming the first missing field.
    """
    cfg = {**raw, **raw.get("text_config", {})}
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        layers = int(cfg["num_hidden_layers"])
    except KeyError as missing:
        raise ModelConfigError(f"config.json has no {missing.args[0]!r}") from None
    head_dim = cfg.get("head_dim") or hidden // heads
    architectures = raw.get("architectures") or ["unknown"]
    return ModelConfig(
        architecture=str(architectures[0]),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        hidden_size=hidden,
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 0),
        torch_dtype=str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
    )


def safetensors_tensor_bytes(path: Path) -> int:
    """Bytes of tensor data in one .safetensors file, from its header's data_offsets.

    Raises ModelConfigError when the header is truncated or not JSON.
    """
    with path.open("rb") as f:
        prefix = f.read(HEADER_LEN_BYTES)
        if len(prefix) != HEADER_LEN_BYTES:
            raise ModelConfigError(f"{path.name} is too short to be a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES:
            raise ModelConfigError(f"{path.name} has an implausible header length {length}")
        try:
            header = json.loads(f.read(length))
        except ValueError as exc:
            raise ModelConfigError(f"{path.name} has a malformed header: {exc}") from None
    return sum(
        int(t["data_offsets"][1]) - int(t["data_offsets"][0]) for name, t in header.items() if name != "__metadata__"
    )


@dataclass(frozen=True)
class Checkpoint:
    """A local checkpoint folder: its config and its real weight bytes."""

    path: Path
    config: ModelConfig
    weights_bytes: int
    raw_config: dict[str, Any]


def read_checkpoint(folder: Path) -> Checkpoint:
    """Read config.json and every *.safetensors header in ``folder``.

    Raises ModelConfigError when the folder, its config.json or its safetensors files are missing.
    """
    if not folder.is_dir():
        raise ModelConfigError(f"{folder} is not a folder")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelConfigError(f"{folder} has no config.json")
    try:
        raw = json.loads(config_path.read_text())
    except ValueError as exc:
        raise ModelConfigError(f"config.json is not valid JSON: {exc}") from None
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelConfigError(f"{folder} has no .safetensors weights")
    return Checkpoint(
        path=folder,
        config=parse_config(raw),
        weights_bytes=sum(safetensors_tensor_bytes(p) for p in files),
        raw_config=raw,
    )
