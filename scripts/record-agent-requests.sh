#!/usr/bin/env bash
# Record each coding-agent CLI's first request with tools, from the versions scripts/install-agent-clis.sh installed,
# into engines/agent_requests/<client>-<version>.json (tests/agentcapture.py says how). Run it after changing a
# CLI's pinned version there; tests/test_agent_requests.py fails until the new version is recorded.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-agent-clis.sh
SECRET_KEY="$(head -c 48 /dev/urandom | base64)" DJANGO_SETTINGS_MODULE=tests.settings exec .venv/bin/python -c \
  'import django; django.setup(); from tests.agentcapture import main; main()'
