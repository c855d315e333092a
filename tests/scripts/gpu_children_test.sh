#!/usr/bin/env bash
# CTest `cpu`: scripts/gpu.sh's time-limited children end with it. A script cut by an outer time
# limit (as a lent machine's call limit or a Slurm job end cuts gpu.sh) leaves none of its
# `timeout` children running: neither a rank-like one in the background nor a step in the
# foreground. The same script without scripts/gpu-children.sh does leave them (what happened on
# 4 x H100, 2026-11-27), so the check can tell.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd -P)
tmp=$(mktemp -d)
trap 'pkill -f "sleep 7[0-9]\.$$" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
expect() {  # name got want
  if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: got '$2', want '$3'"; fails=$((fails + 1)); fi
}
left() { sleep 0.5; pgrep -f "^sleep $1\.$$" | wc -l | tr -d ' '; }

script() {  # with-helpers marker-base
  {
    [ "$1" = 1 ] && echo "source '$src/scripts/gpu-children.sh'"
    echo "timeout -k 1 60 sleep $2.$$ & child_groups+=(\$!)"
    if [ "$1" = 1 ]; then echo "timed -k 1 60 sleep $(($2 + 1)).$$"; else echo "timeout -k 1 60 sleep $(($2 + 1)).$$"; fi
  } >"$tmp/s$1.sh"
}

script 0 70
timeout -k 1 3 bash "$tmp/s0.sh"
expect "without the helpers, an outer limit leaves both children running" "$(($(left 70) + $(left 71)))" 2
pkill -f "sleep 7[01]\.$$"

script 1 72
timeout -k 1 3 bash "$tmp/s1.sh"
expect "with them, the outer limit ends the background child" "$(left 72)" 0
expect "and the foreground step" "$(left 73)" 0

[ "$fails" = 0 ] && echo "all passed" || { echo "$fails failed"; exit 1; }
