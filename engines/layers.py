"""Which layers of a model keep what kind of cache.

- full attention: K and V for every token of the sequence;
- sliding-window attention: K and V for at most ``window`` tokens (Mistral 7B v0.1, Gemma 2 every other
  layer, Gemma 3 five of every six, gpt-oss every other);
- state layers (Mamba, linear attention): a fixed state per sequence, whatever its length.

Sources: each family's config fields as transformers reads them — ``layer_types`` (Gemma 3, gpt-oss,
Qwen3-Next, recent configs), ``hybrid_override_pattern`` (Nemotron-H: ``M`` Mamba, ``*`` attention),
``full_attention_interval`` (Qwen3-Next: the rest is gated DeltaNet linear attention),
``attn_layer_period``/``attn_layer_offset`` (Jamba), ``sliding_window_pattern`` (Gemma 3 before
``layer_types``), model_type ``gemma2`` (alternating, transformers' Gemma2 modeling), ``falcon_h1``
(attention and Mamba in every layer).
"""

from dataclasses import dataclass
from typing import Any

FULL = {"full_attention", "attention", "global", "global_attention"}
SLIDING = {"sliding_attention", "sliding", "local", "local_attention", "chunked_attention"}
STATE = {"linear_attention", "mamba", "mamba2", "ssm", "linear"}


@dataclass(frozen=True)
class LayerMix:
    """Counts of layers by cache kind; ``state_values`` is one state layer's per-sequence size in values."""

    full: int
    sliding: int
    window: int
    state: int
    state_values: int

    @property
    def attention(self) -> int:
        return self.full + self.sliding


def _first(cfg: dict[str, Any], *names: str, default: int = 0) -> int:
    for name in names:
        if cfg.get(name) is not None:
            return int(cfg[name])
    return default


def mamba_state_values(cfg: dict[str, Any]) -> int:
    """Values of one Mamba or linear-attention layer's state per sequence: SSM state + conv state."""
    if cfg.get("linear_num_value_heads"):  # Qwen3-Next gated DeltaNet
        v_heads, k_heads = int(cfg["linear_num_value_heads"]), _first(cfg, "linear_num_key_heads", default=1)
        k_dim = _first(cfg, "linear_key_head_dim", default=128)
        v_dim = _first(cfg, "linear_value_head_dim", default=128)
        conv = _first(cfg, "linear_conv_kernel_dim", default=4) - 1
        return v_heads * k_dim * v_dim + (2 * k_heads * k_dim + v_heads * v_dim) * conv
    hidden = int(cfg["hidden_size"])
    d_state = _first(cfg, "mamba_d_state", "ssm_state_size", "state_size", "mamba_state_size", default=16)
    conv = _first(cfg, "mamba_d_conv", "conv_kernel", "mamba_conv_kernel", default=4) - 1
    n_heads = _first(cfg, "mamba_n_heads", "mamba_num_heads")
    if n_heads:  # Mamba-2
        head_dim = _first(cfg, "mamba_d_head", "mamba_head_dim", default=64)
        groups = _first(cfg, "mamba_n_groups", "n_groups", default=1)
        d_inner = n_heads * head_dim
        return d_inner * d_state + (d_inner + 2 * groups * d_state) * conv
    d_inner = _first(cfg, "mamba_expand", "expand", default=2) * hidden  # Mamba-1 (Jamba)
    return d_inner * d_state + d_inner * conv


def layer_mix(cfg: dict[str, Any], num_layers: int) -> LayerMix:
    """Classify ``num_layers`` layers of a config (the merged text config of a multimodal model)."""
    window = int(cfg.get("sliding_window") or 0)
    kinds: list[str] = []
    if isinstance(cfg.get("layer_types"), list):
        kinds = [str(k) for k in cfg["layer_types"]]
    elif isinstance(cfg.get("hybrid_override_pattern"), str):
        kinds = ["mamba" if c == "M" else "attention" for c in cfg["hybrid_override_pattern"] if c in "M*"]
    elif cfg.get("attn_layer_period"):
        period, offset = int(cfg["attn_layer_period"]), int(cfg.get("attn_layer_offset") or 0)
        kinds = ["attention" if i % period == offset else "mamba" for i in range(num_layers)]
    elif cfg.get("model_type") == "falcon_h1":
        return LayerMix(num_layers, 0, 0, num_layers, mamba_state_values(cfg))
    elif window and cfg.get("model_type") == "gemma2":
        kinds = ["sliding" if i % 2 == 0 else "full_attention" for i in range(num_layers)]
    elif cfg.get("full_attention_interval"):  # Qwen3-Next: every Nth layer full, the rest linear attention
        every = int(cfg["full_attention_interval"])
        kinds = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(num_layers)]
    elif window and (cfg.get("sliding_window_pattern") or str(cfg.get("model_type", "")).startswith("gemma3")):
        pattern = int(cfg.get("sliding_window_pattern") or 6)  # Gemma3TextConfig's default: 5 local, 1 global
        kinds = ["full_attention" if (i + 1) % pattern == 0 else "sliding" for i in range(num_layers)]
    elif window and cfg.get("use_sliding_window", True) and cfg.get("model_type") in {"mistral", "mixtral"}:
        kinds = ["sliding"] * num_layers
    if not kinds:
        return LayerMix(num_layers, 0, 0, 0, 0)
    full = sum(k in FULL for k in kinds)
    sliding = sum(k in SLIDING for k in kinds) if window else 0
    state = sum(k in STATE for k in kinds)
    full += sum(k in SLIDING for k in kinds) - sliding  # "sliding" without a window is full attention
    return LayerMix(full, sliding, window if sliding else 0, state, mamba_state_values(cfg) if state else 0)
