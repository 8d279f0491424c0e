#!/usr/bin/env bash
# Brings Hearth up on this machine without Docker: the web server, two Celery workers and Celery beat (its
# own process, so a killed worker never leaves a second scheduler behind) in the background, SQLite unless DATABASE_URL is set, Redis at REDIS_URL (started here if none answers).
# Stop with scripts/down.sh. Logs and pids live in $HEARTH_DATA_DIR (default ./data). The worker, once started,
# launches again the deployments that were serving when the appliance went down (console.deployments.restoring).
# A bring-up that fails stops what it started (the engines kept running before it are left be).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
case $PY in /*) ;; */*) PY=$PWD/$PY ;; esac  # a path from the clone made whole: ps then shows whose processes they are
DATA=${HEARTH_DATA_DIR:-$PWD/data}
PORT=${HEARTH_PORT:-8000}
export HEARTH_DATA_DIR=$DATA REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
umask 077  # the data folder, its database, logs and secret key are for this user only
mkdir -p "$DATA/logs"
chmod 700 "$DATA" "$DATA/logs"

if [ -z "${SECRET_KEY:-}${SECRET_KEY_FILE:-}" ]; then
  [ -s "$DATA/secret_key" ] || (umask 077 && "$PY" -c 'import secrets; print(secrets.token_urlsafe(50))' > "$DATA/secret_key")
  export SECRET_KEY_FILE=$DATA/secret_key
fi

# A restart keeps the console's outage short: whether the schema needs changing is asked while the old processes
# still serve (a Django start less once they are down), and the change itself waits until they are stopped (the
# old code would write rows the new schema refuses). Then the running workers and beat stop, the web server last
# (HEARTH_RESTART: the API answers until then), and a redis-server up.sh started; serving engines stay.
migrated=0
"$PY" manage.py migrate --check --noinput >/dev/null 2>&1 && migrated=1
KEEP_ENGINES=1 HEARTH_RESTART=1 bash scripts/down.sh 2>&1 |
  sed -n '/^down: \(stopped\|waiting\|[a-z-]* did not end\)/s/^down:/up: restart:/p' || true

# From here every pid file in $DATA is this run's: should a step fail, they are stopped again (the web server, the
# workers, beat, a redis-server started here), and the engines left be, as the restart above left them.
undo() {
  local code=$?
  [ "$code" = 0 ] && return
  echo "up: failed; stopping what this run started" >&2
  KEEP_ENGINES=1 bash scripts/down.sh >&2 || true
  exit "$code"
}
trap undo EXIT

if ! "$PY" -c "import redis, os; redis.Redis.from_url(os.environ['REDIS_URL']).ping()" 2>/dev/null; then
  if ! command -v redis-server >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "up: no Redis answers at $REDIS_URL; installing Debian's redis-server"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  fi
  command -v redis-server >/dev/null || { echo "up: no Redis at $REDIS_URL and redis-server is not installed" >&2; exit 1; }
  REDIS_PORT=$("$PY" -c "import os, urllib.parse; print(urllib.parse.urlsplit(os.environ['REDIS_URL']).port or 6379)")
  echo "up: starting redis-server on 127.0.0.1:$REDIS_PORT (data in $DATA)"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no --dir "$DATA" \
    --pidfile "$DATA/redis.pid" --logfile "$DATA/logs/redis.log"
  sleep 0.5
fi

# Demo mode: with no NVIDIA driver, plan on a simulated box (the console says so) and offer the simulator.
if [ -z "${HEARTH_GPU_INVENTORY:-}" ] && ! nvidia-smi -L >/dev/null 2>&1; then
  export HEARTH_GPU_INVENTORY=sim:8xH100-80GB
  echo "up: no NVIDIA GPU here: demo mode, planning on a simulated 8x H100 box (set HEARTH_GPU_INVENTORY to change)"
fi

[ "$migrated" = 1 ] || "$PY" manage.py migrate --noinput >/dev/null

start() {  # name, command...
  local name=$1; shift
  nohup "$@" >>"$DATA/logs/$name.log" 2>&1 &
  echo $! >"$DATA/$name.pid"
}
fail() {  # a message, then the last lines of a log
  echo "up: $1; see $2" >&2
  tail -20 "$2" >&2
  exit 1
}

# The port free first: a web server that cannot bind it exits after its first checks, and until then another
# program's answer on the port read as the console's ("Hearth is up" while a trial's port was another server's)
for i in $(seq 1 11); do
  "$PY" - "${HEARTH_HOST:-127.0.0.1}" "$PORT" <<'PORTCHECK' && break
import socket, sys
with socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET) as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a closed server's TIME_WAITs pass
    s.bind((sys.argv[1], int(sys.argv[2])))
PORTCHECK
  [ "$i" = 11 ] && { echo "up: port $PORT is taken by another program; set HEARTH_PORT to use another" >&2; exit 1; }
  sleep 0.5  # the web server the restart above stopped may still be letting go of it
done

# HEARTH_WEB_WORKERS processes on one socket (default one per core, at most 8), metrics summed across them
start web "$PY" -m appliance.web_server --host "${HEARTH_HOST:-127.0.0.1}" --port "$PORT"
for i in $(seq 1 61); do
  [ "$i" = 61 ] && fail "the web server did not answer" "$DATA/logs/web.log"
  # the web server started here must be the one answering (not one a killed run left holding the port)
  if ! kill -0 "$(cat "$DATA/web.pid")" 2>/dev/null; then
    tail -20 "$DATA/logs/web.log" | grep -i "address already in use" >/dev/null &&
      echo "up: port $PORT is taken by another program; set HEARTH_PORT to use another" >&2
    fail "the web server exited" "$DATA/logs/web.log"
  fi
  "$PY" -c "import httpx; httpx.get('http://127.0.0.1:$PORT/login/', timeout=1)" 2>/dev/null && break
  sleep 0.5
done

# The workers and beat once the console answers: a bring-up that fails before leaves no worker launching engines.
# Two workers (appliance.celery_queues): one for the upkeep (scrapes, reconcile, alerts, stops, wakes), one for
# the long tasks (launches with their downloads, batches, capacity checks), so neither waits for the other.
# Each counts as up once it says it is ready (its log from this start on).
declare -A log_size
for w in worker worker-long; do log_size[$w]=$(stat -c %s "$DATA/logs/$w.log" 2>/dev/null || echo 0); done
start worker "$PY" -m celery -A appliance worker -Q celery -c 3 --loglevel INFO
start worker-long "$PY" -m celery -A appliance worker -Q long -n long@%h -c 3 --loglevel INFO
start beat "$PY" -m celery -A appliance beat --loglevel INFO -s "$DATA/celerybeat-schedule"
for w in worker worker-long; do
  for i in $(seq 1 121); do
    [ "$i" = 121 ] && fail "the Celery $w did not say it was ready" "$DATA/logs/$w.log"
    kill -0 "$(cat "$DATA/$w.pid")" 2>/dev/null || fail "the Celery $w exited" "$DATA/logs/$w.log"
    kill -0 "$(cat "$DATA/beat.pid")" 2>/dev/null || fail "Celery beat exited" "$DATA/logs/beat.log"
    # grep reads to the end (no -q): tail is never cut by a closed pipe, which pipefail would take for a failure
    if tail -c +$((log_size[$w] + 1)) "$DATA/logs/$w.log" | grep -E "@[^ ]+ ready\." >/dev/null; then break; fi
    sleep 0.5
  done
done
# /login/ sends a first visit to the set-up page while no one can sign in
first=$("$PY" -c "import httpx; print(httpx.get('http://127.0.0.1:$PORT/login/', timeout=10).headers.get('location'))" \
  2>/dev/null || true)
if [ "$first" = "/setup/" ]; then
  echo "Hearth is up: open http://127.0.0.1:$PORT/ (no admin exists yet: the first visit creates one)."
else
  echo "Hearth is up: open http://127.0.0.1:$PORT/ and sign in."
fi
# the stop command with the folder this run used (a DATABASE_URL is not echoed: it may hold a password)
STOP="make down"
[ "$DATA" != "$PWD/data" ] && STOP="HEARTH_DATA_DIR=$DATA make down"
[ -n "${DATABASE_URL:-}" ] && STOP="$STOP (with this DATABASE_URL set)"
echo "OpenAI-compatible base URL for tools: http://127.0.0.1:$PORT/v1 . Logs: $DATA/logs. Stop: $STOP"
# where its state lives (credentials left out): a Redis database another program also uses is seen here
"$PY" - <<'WHERE'
import os, urllib.parse
redis = urllib.parse.urlsplit(os.environ["REDIS_URL"])
db = redis.path.strip("/") or "0"
database = "PostgreSQL" if os.environ.get("DATABASE_URL") else f"SQLite in {os.environ['HEARTH_DATA_DIR']}"
print(f"Database: {database}. Redis: {redis.hostname}:{redis.port or 6379}, database {db} (set REDIS_URL for another).")
WHERE
# the deployments serving when the appliance went down launch again (console.deployments.restoring): until each is
# ready a request for it waits or gets a 503 that says so, which "Hearth is up" alone did not warn of
"$PY" - <<'COMING' 2>/dev/null || true
import os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
import django
django.setup()
from console.deployments.models import Deployment, DeploymentState as S, DesiredState
coming = Deployment.objects.filter(
    desired=DesiredState.SERVING, model__isnull=False, state__in=[S.STOPPED, S.PENDING, S.PULLING, S.STARTING, S.LOADING]
).order_by("name")
if names := [f"{d.name} ({'to launch' if d.state == S.STOPPED else d.state})" for d in coming]:
    print(f"Launching again what served before: {', '.join(names)}; each serves once ready (the Deployments page).")
COMING
