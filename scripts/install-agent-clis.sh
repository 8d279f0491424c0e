#!/usr/bin/env bash
# The coding-agent CLIs the agent tests drive (tests/test_agents_cli.py), from npm at pinned versions, into
# $HEARTH_CACHE_DIR/npm (default ~/.cache/hearth/npm): Claude Code (`claude`) and Codex (`codex`, whose npm
# package carries its native binary). The versions are the ones measured in ../shared/FACTS.md ("Real
# coding-agent clients"). A second run finds them and returns at once. Needs node and npm (Debian's, installed
# here when missing and run as root).
set -euo pipefail

CLAUDE_CODE_VERSION=2.1.328
CODEX_VERSION=0.169.0
prefix="${HEARTH_CACHE_DIR:-$HOME/.cache/hearth}/npm"

installed() {  # package version: whether that version is in the prefix
  local manifest="$prefix/lib/node_modules/$1/package.json"
  [ -f "$manifest" ] && grep -q "\"version\": \"$2\"" "$manifest"
}

if installed @anthropic-ai/claude-code "$CLAUDE_CODE_VERSION" && installed @openai/codex "$CODEX_VERSION"; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "install-agent-clis: installing nodejs and npm from Debian"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
echo "install-agent-clis: installing Claude Code $CLAUDE_CODE_VERSION and Codex $CODEX_VERSION into $prefix"
mkdir -p "$prefix"
npm install --global --prefix "$prefix" --no-fund --no-audit --loglevel=error \
  "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION"
"$prefix/bin/claude" --version
"$prefix/bin/codex" --version
