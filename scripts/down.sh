#!/usr/bin/env bash
# Stops what scripts/up.sh started (web, worker, beat). Engines the worker launched keep running until their
# deployments are stopped in the console; a redis-server started by up.sh is stopped too.
set -u
cd "$(dirname "$0")/.."
DATA=${HEARTH_DATA_DIR:-$PWD/data}
for name in web worker beat redis; do
  pidfile=$DATA/$name.pid
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null && echo "down: stopped $name ($pid)"
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  rm -f "$pidfile"
done
