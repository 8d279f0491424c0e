#!/usr/bin/env bash
# The coding-agent CLIs the agent tests drive (tests/test_agents_cli.py, tests/test_agents_other_cli.py), at pinned
# versions, under $HEARTH_CACHE_DIR (default ~/.cache/hearth). From npm into npm/: Claude Code (`claude`), Codex
# (`codex`, whose npm package carries its native binary), OpenCode (`opencode`, the same) and Continue's `cn`.
# From PyPI, each into its own venv (their pins clash with Hearth's and with each other): `llm` in venv-llm and
# aider in venv-aider. Claude Code's and Codex's versions are the ones measured in ../shared/FACTS.md ("Real
# coding-agent clients"). A second run finds them and returns at once. Needs node and npm (Debian's, installed
# here when missing and run as root) and a Python 3.10 to 3.12 (aider-chat 0.86 requires one).
set -euo pipefail

CLAUDE_CODE_VERSION=2.1.328
CODEX_VERSION=0.169.0
OPENCODE_VERSION=1.18.33
CONTINUE_CLI_VERSION=1.5.47
LLM_VERSION=0.36
AIDER_VERSION=0.86.2
cache="${HEARTH_CACHE_DIR:-$HOME/.cache/hearth}"
prefix="$cache/npm"
PYTHON=${HEARTH_AGENT_PYTHON:-$(for p in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3 python3.11 /usr/bin/python3; do
  "$p" -c 'import sys; assert (3, 10) <= sys.version_info < (3, 13)' 2>/dev/null && echo "$p" && break; done)}

installed() {  # package version: whether that version is in the prefix
  local manifest="$prefix/lib/node_modules/$1/package.json"
  [ -f "$manifest" ] && grep -q "\"version\": \"$2\"" "$manifest"
}

npm_packages=()
installed @anthropic-ai/claude-code "$CLAUDE_CODE_VERSION" || npm_packages+=("@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION")
installed @openai/codex "$CODEX_VERSION" || npm_packages+=("@openai/codex@$CODEX_VERSION")
installed opencode-ai "$OPENCODE_VERSION" || npm_packages+=("opencode-ai@$OPENCODE_VERSION")
installed @continuedev/cli "$CONTINUE_CLI_VERSION" || npm_packages+=("@continuedev/cli@$CONTINUE_CLI_VERSION")
if [ ${#npm_packages[@]} -gt 0 ]; then
  if ! command -v npm >/dev/null; then
    echo "install-agent-clis: installing nodejs and npm from Debian"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  fi
  echo "install-agent-clis: installing ${npm_packages[*]} into $prefix"
  mkdir -p "$prefix"
  npm install --global --prefix "$prefix" --no-fund --no-audit --loglevel=error "${npm_packages[@]}"
fi

pip_venv() {  # name package version command: that version of a PyPI package in its own venv, cache/venv-NAME
  local venv="$cache/venv-$1"
  [ -x "$venv/bin/$4" ] && [ "$("$venv/bin/python" -m pip show "$2" 2>/dev/null | sed -n 's/^Version: //p')" = "$3" ] \
    && return 0
  echo "install-agent-clis: installing $2 $3 into $venv"
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$2==$3" 2> >(grep -v 'is ignored' >&2)
}
if [ -z "$PYTHON" ]; then
  echo "install-agent-clis: llm and aider need a Python 3.10 to 3.12 (aider-chat $AIDER_VERSION's range); none found" >&2
  exit 1
fi
pip_venv llm llm "$LLM_VERSION" llm
pip_venv aider aider-chat "$AIDER_VERSION" aider
