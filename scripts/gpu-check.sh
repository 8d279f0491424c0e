#!/usr/bin/env bash
# gpu-check.sh: on a machine with an NVIDIA GPU and the project's Python packages (.venv, or $PY), prints
# what Hearth reads of the real GPUs through its own code (NVML via appliance.hardware) and how it would size
# a few catalog models on them (manage.py gpu_check), then the pre-flight checks (manage.py doctor), within
# 2 minutes. Needs no database and changes nothing; HEARTH_GPU_INVENTORY may name a simulated profile instead
# (sim:8xH100-80GB) to see the output's shape on a machine without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export HEARTH_GPU_INVENTORY=${HEARTH_GPU_INVENTORY:-nvml}
export HEARTH_DATA_DIR=$scratch DATABASE_URL=
export SECRET_KEY=${SECRET_KEY:-gpu-check-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv
fi
timeout 100 "$PY" manage.py gpu_check "$@"
rc=$?
echo "--- pre-flight (manage.py doctor; its database line fails here: this check uses none)"
timeout 20 "$PY" manage.py doctor
exit "$rc"
