# Sourced by the engine setup scripts, after they define pip() (their pip, its warnings filtered) and VENV:
#   shown [pip_progress.py's options] -- pip's arguments
# runs pip with each download shown with its size and progress, and a total (pip_progress.py), each line after the
# script's name. A pip from before --progress-bar raw (one that could not upgrade itself offline) still names each
# download with its size.
shown() {
  local options=() bar=raw
  while [ "$1" != -- ]; do options+=("$1"); shift; done
  shift
  "$VENV/bin/pip" download --progress-bar raw --help >/dev/null 2>&1 || bar=off
  pip "$@" --progress-bar "$bar" \
    | "$VENV/bin/python" "$(dirname "${BASH_SOURCE[0]}")/pip_progress.py" "$(basename "$0" .sh): " "${options[@]}"
}
