#!/usr/bin/env bash
# The workloads' bench tables (workloads/*/bench/table.py) never name as best a timing the harness
# flagged (faster than its bound allows, also when re-run alone): a fake results folder holds a
# seed, an honest program and a faster flagged one, and each table must pick the honest one.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

make_results() {  # dir size world
  python3 - "$1" "$2" "$3" <<'PY'
import json, os, sys
root, size, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for name, ms, flag in (("seed", 2.0, "ok"), ("honest", 1.5, "ok"), ("fast_flagged", 0.5, "flagged")):
    os.makedirs(os.path.join(root, name))
    s = {"size": size, "candidate_ms": ms, "baseline_ms": 2.0, "compute_ms": 1.2, "comm_ms": 0.6, "bound_ms": 1.2,
         "speedup": 2.0 / ms, "ratio_to_bound": ms / 1.2, "plausibility": flag}
    json.dump({"combined_score": 2.0 / ms, "public": {"sizes": [s]}, "private": {"world": world}},
              open(os.path.join(root, name, "metrics.json"), "w"))
    json.dump({"correct": True, "error": ""}, open(os.path.join(root, name, "correct.json"), "w"))
PY
}

check() {  # workload size
  local dir=$tmp/$1 out
  make_results "$dir" "$2" 2
  out=$(python3 "$root/workloads/$1/bench/table.py" "$dir" 2>&1)
  if grep -q "| fast_flagged |" <<<"$(sed -n '1,8p' <<<"$out")" || ! grep -q "honest" <<<"$out"; then
    echo "FAIL $1: the flagged program is named best, or the honest one is missing"; echo "$out" | head -12; failed=1
  else
    echo "ok   $1"
  fi
}

check moe 1280321
check ring_attention 819232
check kv_transfer 1024
check gemm_allgather 4096
exit $failed
