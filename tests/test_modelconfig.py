"""Reading a checkpoint folder: config.json and real tensor bytes from safetensors headers."""

import json
import struct
from pathlib import Path

import pytest

from engines.modelconfig import ModelConfigError, read_checkpoint

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 64,
    "torch_dtype": "bfloat16",
}


def write_safetensors(path: Path, tensors: dict[str, int]) -> None:
    """A valid safetensors file with zero-filled tensors of the given byte sizes (bf16, 1-D)."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, size in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [size // 2], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def checkpoint(tmp_path: Path, shards: list[dict[str, int]]) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    for i, tensors in enumerate(shards):
        write_safetensors(tmp_path / f"model-{i:05d}.safetensors", tensors)
    return tmp_path


def test_it_sums_tensor_bytes_across_shards(tmp_path: Path) -> None:
    ckpt = read_checkpoint(checkpoint(tmp_path, [{"a": 1000, "b": 24}, {"c": 4096}]))
    assert ckpt.weights_bytes == 1000 + 24 + 4096
    assert ckpt.tensor_dtypes == ["BF16"]
    assert ckpt.config.head_dim == 16


def test_it_refuses_a_folder_without_config(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match=r"no config\.json"):
        read_checkpoint(tmp_path)


def test_it_refuses_a_folder_without_safetensors(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    with pytest.raises(ModelConfigError, match=r"no \.safetensors"):
        read_checkpoint(tmp_path)


def test_it_refuses_a_truncated_header(tmp_path: Path) -> None:
    checkpoint(tmp_path, [])
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 50) + b'{"a": ')
    with pytest.raises(ModelConfigError, match="malformed header"):
        read_checkpoint(tmp_path)


def test_it_refuses_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="is not a folder"):
        read_checkpoint(tmp_path / "nope")


def test_it_refuses_config_that_is_not_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{nope")
    with pytest.raises(ModelConfigError, match="not valid JSON"):
        read_checkpoint(tmp_path)
