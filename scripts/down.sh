#!/usr/bin/env bash
# Stops what scripts/up.sh started: the web server, Celery beat, the Celery workers, the engines the worker launched
# (their deployments are marked stopped and keep what is wanted of them: the next make up launches the ones that
# were serving again, not the ones an admin stopped; KEEP_ENGINES=1 leaves them running and says which), and a
# redis-server started by up.sh. Give it the HEARTH_DATA_DIR (and DATABASE_URL) that `make up` had.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DATA=${HEARTH_DATA_DIR:-$PWD/data}
export HEARTH_DATA_DIR=$DATA

# What each process up.sh starts runs: a pid file outlives its process (a kill -9, an OOM kill, a reboot) and its
# number may be another program's by now (a trial's make down killed an unrelated process that had it).
declare -A RUNS=([web]=appliance.web_server [worker]="celery -A appliance" [worker-long]="celery -A appliance"
  [beat]="celery -A appliance" [redis]=redis-server)

ours() {  # pid, name: whether the process is the one up.sh started as name for this data folder
  local pid=$1 cmd dir
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ "$cmd" == *"${RUNS[$2]}"* ]] || return 1
  [ "$2" = redis ] && return 0  # redis-server writes its title over its environment; its pid file is its own
  # up.sh exports HEARTH_DATA_DIR to what it starts: another appliance's process of the same kind is not ours either
  dir=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^HEARTH_DATA_DIR=//p')
  [ -n "$dir" ] && [ "$(realpath -m "$dir")" = "$(realpath -m "$DATA")" ]
}

stop() {  # name [seconds to wait, default 10] [what it finishes meanwhile] [a signal for one still running then]
  local pidfile=$DATA/$1.pid pid wait=${2:-10} tick
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if ! ours "$pid" "$1" || ! kill "$pid" 2>/dev/null; then
    echo "down: $1 was not running (its pid file named $pid, which has ended or is another program's now)"
    rm -f "$pidfile"
    return 0
  fi
  echo "down: stopped $1 ($pid)"
  for tick in $(seq 1 $((wait * 5))); do
    kill -0 "$pid" 2>/dev/null || break
    # said after 2 s, so a stop that waits is not taken for a hang
    [ "$tick" = 10 ] && echo "down: waiting up to $wait s for $1 to end${3:+: $3}"
    sleep 0.2
  done
  if [ -n "${4:-}" ] && kill -0 "$pid" 2>/dev/null; then
    echo "down: $1 did not end in $wait s; sending SIG$4"
    kill -"$4" "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  rm -f "$pidfile"
}

# Whether process $1 runs the argv the JSON list in file $2 holds: the engine the process runtime started under that
# name (appliance.runtimes.process checks so too).
runs_argv() {
  "$PY" - "$1" "$2" 2>/dev/null <<'EOF'
import json, sys
try:
    with open(f"/proc/{sys.argv[1]}/cmdline", "rb") as running, open(sys.argv[2]) as started:
        sys.exit(running.read().decode("utf-8", "surrogateescape").split("\0")[:-1] != json.load(started))
except (OSError, ValueError):
    sys.exit(1)
EOF
}

# Without Hearth's database (none made yet, or unreachable): the process-runtime engines by their pid files.
engines_by_pidfile() {
  local pidfile pid name
  for pidfile in "$DATA"/engines/*.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile"); name=$(basename "$pidfile" .pid)
    kill -0 "$pid" 2>/dev/null || continue
    runs_argv "$pid" "${pidfile%.pid}.argv" || { echo "down: $name's pid file names $pid, no longer its engine"; continue; }
    if [ "${KEEP_ENGINES:-0}" = 1 ]; then
      echo "down: kept running (KEEP_ENGINES=1) $name ($pid)"
    else
      kill -TERM -- "-$pid" 2>/dev/null && echo "down: stopped engine $name ($pid)"
      for _ in $(seq 1 50); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.2; done
      kill -KILL -- "-$pid" 2>/dev/null
      rm -f "$pidfile"
    fi
  done
}

engines() {
  if [ -z "${SECRET_KEY:-}${SECRET_KEY_FILE:-}" ] && [ -s "$DATA/secret_key" ]; then
    export SECRET_KEY_FILE=$DATA/secret_key
  fi
  local keep=()
  [ "${KEEP_ENGINES:-0}" = 1 ] && keep=(--keep)
  if [ -x "$PY" ] && { [ -n "${DATABASE_URL:-}" ] || [ -f "$DATA/hearth.sqlite3" ]; } \
    && "$PY" manage.py stop_engines "${keep[@]}" 2>"$DATA/logs/down.log"; then
    return 0
  fi
  [ -s "$DATA/logs/down.log" ] && echo "down: Hearth's database did not answer ($DATA/logs/down.log); using the engines' pid files"
  engines_by_pidfile
}

if [ ! -d "$DATA" ]; then  # a data folder make up never had: say so rather than stop nothing in silence
  echo "down: no Hearth data folder at $DATA; give make down the HEARTH_DATA_DIR that make up had" >&2
  exit 1
fi
mkdir -p "$DATA/logs"
# First the long-task worker, which sends load to the web server (a batch's runner, a capacity check). A launch
# mid-download or a batch's runner would hold its warm shutdown for as long as it runs: after 10 s, Celery's cold
# shutdown (SIGQUIT) ends it; the next start resumes the launch (the download where it stopped) and the batch, and
# the check reads failed
stop worker-long 10 "the launches, batches and checks it runs" QUIT
drain() {
  stop web $((${HEARTH_DRAIN_SECONDS:-30} + 5)) "its open streams get ${HEARTH_DRAIN_SECONDS:-30} s (HEARTH_DRAIN_SECONDS) to finish"
}
# make up's restart (scripts/up.sh sets HEARTH_RESTART=1 with KEEP_ENGINES=1): the web server last, so the API
# answers while the workers stop, and the engines, which serve on, not listed
[ "${HEARTH_RESTART:-0}" = 1 ] || drain
stop beat
stop worker  # before the engines: its reconcile would restart them
if [ "${HEARTH_RESTART:-0}" = 1 ]; then drain; else engines; fi
stop redis
