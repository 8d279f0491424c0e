"""Model facts read from a checkpoint: config.json and the safetensors headers.

Weight bytes are the checkpoint's real tensor bytes, summed from each safetensors header's
``data_offsets`` (format: 8-byte little-endian header length, then a JSON header;
https://github.com/huggingface/safetensors#format), never parameters x dtype from a table.
"""

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.layers import LayerMix, layer_mix
from engines.parsers import template_text

HEADER_LEN_BYTES = 8
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit on header size

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


class ModelConfigError(ValueError):
    """The folder or config is not a usable checkpoint; the message says what is missing or malformed."""


@dataclass(frozen=True)
class ModelConfig:
    """What sizing needs from config.json.

    head_dim is config's explicit ``head_dim`` when present, else hidden_size / num_attention_heads.
    ``kv_lora_rank`` > 0 marks multi-head latent attention (MLA). ``layers`` says which layers keep
    per-token KV (full or sliding-window) and which keep a fixed state per sequence.
    """

    architecture: str
    model_type: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int  # the model's longest context, tokens (max_context); 0 when unknown
    torch_dtype: str
    kv_lora_rank: int
    qk_rope_head_dim: int
    num_experts: int
    num_experts_per_tok: int
    quantization: str  # "" for none, else quantization_config.quant_method (fp8, awq, gptq, mxfp4, ...)
    tie_word_embeddings: bool
    needs_remote_code: bool
    layers: LayerMix

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0


def _int(cfg: dict[str, Any], *names: str, default: int = 0) -> int:
    for name in names:
        if cfg.get(name) is not None:
            return int(cfg[name])
    return default


# Contexts a sparse config.json leaves to its transformers class's default, tokens, by model_type.
CONTEXT_DEFAULTS = {
    "gemma3_text": 131_072,  # transformers' Gemma3TextConfig(max_position_embeddings=131072): Gemma 3's 128K
}


def max_context(cfg: dict[str, Any]) -> int:
    """The longest context the model takes, tokens (0: unknown), as vLLM derives it
    (vllm/config/model.py ``_get_and_verify_max_len``): max_position_embeddings or its aliases, else its
    class's default (CONTEXT_DEFAULTS); YaRN rope scaling multiplies its original_max_position_embeddings by
    its factor."""
    base = _int(
        cfg,
        "max_position_embeddings",
        "max_sequence_length",
        "seq_length",
        "n_positions",
        default=CONTEXT_DEFAULTS.get(str(cfg.get("model_type")), 0),
    )
    rope = cfg.get("rope_scaling") or {}
    if isinstance(rope, dict) and (rope.get("rope_type") or rope.get("type")) == "yarn" and rope.get("factor"):
        base = int(int(rope.get("original_max_position_embeddings") or base) * float(rope["factor"]))
    return base


def parse_config(raw: dict[str, Any]) -> ModelConfig:
    """Read a config.json dict (a multimodal model's nested ``text_config`` or ``llm_config`` wins).

    Raises ModelConfigError naming the first missing field.
    """
    if not isinstance(raw, dict):
        raise ModelConfigError("config.json is not a JSON object")
    cfg = {**raw, **(raw.get("text_config") or raw.get("llm_config") or {})}
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        layers = int(cfg["num_hidden_layers"])
    except KeyError as missing:
        raise ModelConfigError(f"config.json has no {missing.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ModelConfigError(f"config.json has a non-numeric size: {exc}") from None
    if heads <= 0 or hidden <= 0 or layers <= 0:
        raise ModelConfigError("config.json sizes must be positive")
    quant = raw.get("quantization_config") or cfg.get("quantization_config") or {}
    return ModelConfig(
        architecture=str((raw.get("architectures") or ["unknown"])[0]),
        model_type=str(cfg.get("model_type") or raw.get("model_type") or ""),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=_int(cfg, "num_key_value_heads", default=heads),
        head_dim=_int(cfg, "head_dim", default=hidden // heads),
        hidden_size=hidden,
        intermediate_size=_int(cfg, "moe_intermediate_size", "intermediate_size", "ffn_dim", default=4 * hidden),
        vocab_size=_int(cfg, "vocab_size", default=32_000),
        max_position_embeddings=max_context(cfg),
        torch_dtype=str(cfg.get("torch_dtype") or cfg.get("dtype") or raw.get("torch_dtype") or "bfloat16"),
        kv_lora_rank=_int(cfg, "kv_lora_rank"),
        qk_rope_head_dim=_int(cfg, "qk_rope_head_dim"),
        num_experts=_int(cfg, "num_local_experts", "n_routed_experts", "num_experts"),
        num_experts_per_tok=_int(cfg, "num_experts_per_tok", "moe_topk", "top_k_experts"),
        quantization=str(quant.get("quant_method") or "") if isinstance(quant, dict) else "",
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", raw.get("tie_word_embeddings", False))),
        needs_remote_code="auto_map" in raw,
        layers=layer_mix(cfg, layers),
    )


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of one .safetensors file: tensor name → {dtype, shape, data_offsets}.

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
    if not isinstance(header, dict):
        raise ModelConfigError(f"{path.name} has a malformed header: not a JSON object")
    return {name: t for name, t in header.items() if name != "__metadata__"}


def safetensors_tensor_bytes(path: Path) -> int:
    """Bytes of tensor data in one .safetensors file, from its header's data_offsets."""
    return sum(int(t["data_offsets"][1]) - int(t["data_offsets"][0]) for t in safetensors_header(path).values())


@dataclass(frozen=True)
class Checkpoint:
    """A local checkpoint folder: its config and its real weight bytes."""

    path: Path
    config: ModelConfig
    weights_bytes: int
    raw_config: dict[str, Any]
    tensor_dtypes: list[str]  # the dtypes actually stored, e.g. ["BF16"] or ["F8_E4M3", "BF16"]
    chat_template: str = ""  # the chat template's text (read_chat_template), "" when it has none


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
    headers = [safetensors_header(p) for p in files]
    tensors = [t for header in headers for t in header.values()]
    return Checkpoint(
        path=folder,
        config=parse_config(raw),
        weights_bytes=sum(int(t["data_offsets"][1]) - int(t["data_offsets"][0]) for t in tensors),
        raw_config=raw,
        tensor_dtypes=sorted({str(t["dtype"]) for t in tensors}),
        chat_template=read_chat_template(folder),
    )


def read_chat_template(folder: Path) -> str:
    """The chat template of a checkpoint folder: ``chat_template.jinja``, else ``tokenizer_config.json``'s
    ``chat_template`` (engines.parsers.template_text); "" when neither holds one or either is unreadable."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(errors="replace")
    tokenizer = folder / "tokenizer_config.json"
    try:
        config = json.loads(tokenizer.read_text()) if tokenizer.is_file() else None
    except ValueError:
        return ""
    return template_text(config if isinstance(config, dict) else None)
