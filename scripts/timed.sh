#!/usr/bin/env bash
# timed.sh NAME COMMAND...: runs COMMAND, then prints "stage NAME: N s, ok" (or "failed (exit CODE)") and
# appends that line to $HEARTH_STAGES (when set), so `make test` can list every stage's time at its end.
# pytest's "no tests ran" (exit 5) is a failure here, as CI counts it.
set -uo pipefail
name=$1; shift
start=$SECONDS
"$@"
rc=$?
[ "$rc" -eq 5 ] && echo "timed: pytest collected no tests for '$name': that is a failure" >&2
line="stage $name: $((SECONDS - start)) s, $([ "$rc" -eq 0 ] && echo ok || echo "failed (exit $rc)")"
echo "$line"
[ -n "${HEARTH_STAGES:-}" ] && echo "$line" >> "$HEARTH_STAGES"
exit "$rc"
