#!/usr/bin/env bash
# What the test suite needs beside Python packages, on a machine of the project's kind (Debian, root):
# PostgreSQL and Redis running (this kind has both installed; started here if they are down), Debian's
# Chromium for the browser tests (Playwright drives it; no browser download is possible here) and
# Debian's docker.io with its daemon for the Docker-runtime tests (it starts in about two seconds,
# ../shared/FACTS.md), Debian's caddy (2.6.2), the HTTPS proxy tests/test_tls_proxy.py puts in front of Hearth,
# Debian's docker-compose, which checks compose.yaml, the coding-agent CLIs from npm the agent tests drive
# (scripts/install-agent-clis.sh), and npm's oidc-provider, the real OpenID provider tests/test_oidc.py signs in
# through (under ~/.cache/hearth/npm), promtool (Debian's prometheus, unpacked under ~/.cache/hearth/prometheus) and
# nginx (Debian's, unpacked under ~/.cache/hearth/nginx: the gateway bench's peer, bench/nginx_peer.py).
# A second run finds everything and returns at once.
set -euo pipefail

pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
# The suite runs in parallel (make test): each pytest-xdist worker has its own web server, Celery worker and
# engines, each with a few connections; PostgreSQL's default of 100 runs out ("too many clients already").
if [ "$(psql -h 127.0.0.1 -U postgres -Atc 'show max_connections' 2>/dev/null || echo 300)" -lt 300 ]; then
  echo "test-services: PostgreSQL's max_connections to 300 for the parallel suite (a restart)"
  psql -h 127.0.0.1 -U postgres -qc "ALTER SYSTEM SET max_connections = 300"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main restart
fi
redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 || redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 \
  --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker-compose >/dev/null || missing+=(docker-compose)  # tests/test_image.py: `docker-compose config`
command -v caddy >/dev/null || missing+=(caddy)  # tests/test_tls_proxy.py: Hearth's Caddyfile in front of Hearth
if [ ${#missing[@]} -gt 0 ]; then
  echo "test-services: installing ${missing[*]} from Debian"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  echo "test-services: starting dockerd (log: /var/log/hearth-dockerd.log)"
  nohup dockerd >/var/log/hearth-dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start:" >&2; tail -20 /var/log/hearth-dockerd.log >&2; exit 1; }
fi
bash "$(dirname "$0")/install-agent-clis.sh"

OIDC_PROVIDER=oidc-provider@9.13.3
NPM_PREFIX=${HEARTH_CACHE_DIR:-$HOME/.cache/hearth}/npm
if ! grep -q '"version": "9.13.3"' "$NPM_PREFIX/lib/node_modules/oidc-provider/package.json" 2>/dev/null; then
  echo "test-services: installing $OIDC_PROVIDER under $NPM_PREFIX"
  npm install -g --prefix "$NPM_PREFIX" --no-fund --no-audit "$OIDC_PROVIDER" >/dev/null
fi

# promtool, which checks Prometheus's alert rules (scripts/monitoring/alerts.yml; tests/test_alert_rules_live.py):
# Debian's prometheus package unpacked under the cache, not installed, so no Prometheus server starts here.
PROMETHEUS_DIR=${HEARTH_CACHE_DIR:-$HOME/.cache/hearth}/prometheus
if [ ! -x "$PROMETHEUS_DIR/usr/bin/promtool" ]; then
  echo "test-services: unpacking Debian's prometheus (promtool) under $PROMETHEUS_DIR"
  download=$(mktemp -d)
  (cd "$download" && { apt-get download prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download prometheus >/dev/null; }; })
  dpkg-deb -x "$download"/prometheus_*.deb "$PROMETHEUS_DIR"
  rm -rf "$download"
fi

# nginx, the gateway bench's streaming peer (bench/nginx_peer.py unpacks it the same way; tests/test_bench_report.py
# checks its configuration with it): unpacked, not installed, so no nginx service starts here.
NGINX_DIR=${HEARTH_CACHE_DIR:-$HOME/.cache/hearth}/nginx
if [ ! -x "$NGINX_DIR/usr/sbin/nginx" ]; then
  echo "test-services: unpacking Debian's nginx under $NGINX_DIR"
  download=$(mktemp -d)
  (cd "$download" && { apt-get download nginx >/dev/null 2>&1 || { apt-get update -qq && apt-get download nginx >/dev/null; }; })
  dpkg-deb -x "$download"/nginx_*.deb "$NGINX_DIR"
  rm -rf "$download"
fi
