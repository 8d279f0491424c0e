#!/usr/bin/env bash
# Builds the real SGLang CPU engine Hearth tests against, cached under ~/.cache/hearth:
#   venv-sglang-cpu/   PyPI's sglang in its own venv, run with SGLANG_USE_CPU_ENGINE=1 --device cpu
# The model folder it serves (models/SmolLM2-135M-Instruct) is made by setup-vllm-cpu.sh.
# A second run finds the venv and returns at once. Why this release and these packages: sglang-cpu.md.
set -euo pipefail

# The newest release whose CPU engine starts without SGLang's own CPU kernels (sgl_kernel, which PyPI
# does not carry: SGLang builds them from its Git sources). 0.5.16 to 0.5.23 import sgl_kernel on CPU.
SGLANG_VERSION=0.5.15.post1
# A CUDA build of torch (it runs on the CPU) with the torchvision that imports beside it; both lie in
# the machine's local wheel store for Python 3.11. SGLang imports torchvision unconditionally.
TORCH_VERSION=2.14.1
TORCHVISION_VERSION=0.29.1
CACHE=${HEARTH_CACHE_DIR:-$HOME/.cache/hearth}
VENV=$CACHE/venv-sglang-cpu
PYTHON=${HEARTH_ENGINE_PYTHON:-python3.11}

# Two runs at once (two `make up`s, or `make up` beside `make test`) would each remove the other's half-built venv:
# the second waits for the first, then finds its work done.
mkdir -p "$CACHE"
exec 9>"$CACHE/.setup-sglang-cpu.lock"
flock -n 9 || { echo "setup-sglang-cpu: another install into $CACHE is under way; waiting for it to finish"; flock 9; }

# sglang's own requirements (its wheel's METADATA) less the CUDA-only kernels and audio/video packages
# the CPU engine never imports for a text model; pins as that wheel has them.
SGLANG_DEPS=(
  aiohttp "anthropic>=0.20.0" apache-tvm-ffi==0.1.11 blobfile==3.0.0 build compressed-tensors datasets distro
  easydict einops fastapi gguf interegular IPython "kernels<0.15,>=0.14.1" "llguidance<0.8.0,>=0.7.11"
  "mistral_common>=1.11.5" modelscope msgspec ninja numpy nvidia-ml-py openai==2.6.1 openai-harmony==0.0.4
  orjson outlines==0.1.11 packaging partial_json_parser pillow "prometheus-client>=0.20.0" psutil py-spy
  pybase64 pydantic python-multipart "pyzmq>=25.1.2" requests scipy sentencepiece setproctitle
  "smg-grpc-servicer>=0.5.0" soundfile==0.13.1 tiktoken tqdm transformers==5.12.1 uvicorn uvloop watchfiles
  xgrammar==0.2.1 zstandard
)

mkdir -p "$CACHE/pip"
# pip warns about every local index folder that lacks a package, and about each of sglang's requirements
# left out on purpose (below): keep the log readable. Any other conflict still shows.
QUIET="is ignored: it is neither a file nor a directory|^sglang $SGLANG_VERSION requires|dependency resolver does not"
pip() { "$VENV/bin/pip" "$@" 2> >(grep -Ev "$QUIET" >&2); }
# shown: pip with each download's size and progress, and the venv's size while pip installs.
source "$(dirname "$0")/pip-shown.sh"
VENV_MB=6700  # the venv's size once installed (du -sm --apparent-size), what the install's progress is shown against

if [ ! -f "$VENV/.hearth-ok" ]; then
  echo "setup-sglang-cpu: installing sglang==$SGLANG_VERSION into $VENV (about 6.7 GB once installed; a few minutes, once)"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  pip install -q --cache-dir "$CACHE/pip" --upgrade pip
  WATCH=(--watch "$VENV" --expect-mb "$VENV_MB")
  shown "${WATCH[@]}" -- install --cache-dir "$CACHE/pip" "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
  # --no-deps: its requirements name CUDA kernels (flashinfer, sglang-kernel, ...) that are useless here.
  shown "${WATCH[@]}" -- install --cache-dir "$CACHE/pip" --no-deps "sglang==$SGLANG_VERSION"
  shown "${WATCH[@]}" -- install --cache-dir "$CACHE/pip" "torch==$TORCH_VERSION" "${SGLANG_DEPS[@]}"
  SGLANG_USE_CPU_ENGINE=1 PYTHONWARNINGS=ignore "$VENV/bin/python" -c "import sglang.srt.entrypoints.http_server"
  touch "$VENV/.hearth-ok"
fi

echo "setup-sglang-cpu: engine python $VENV/bin/python (sglang $SGLANG_VERSION)"
