#!/usr/bin/env bash
# CTest `gpu`: the fast path's verification gate on 2 GPUs (`scripts/gpu.sh convert-gate`, also a
# section of `scripts/gpu.sh check`), failing when any conversion does not match its original on every rank.
# Usage: gate_test.sh <braid binary>. Skips (77) where fewer than 2 GPUs exist.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
  echo "SKIPPED: fewer than 2 GPUs"
  exit 77
fi
out=$(mktemp -d)
report=$(bash "$root/scripts/gpu.sh" convert-gate --braid "$1" --out "$out")
echo "$report"
rm -rf "$out"
echo "$report" | grep -q "| PASS" || exit 1
! echo "$report" | grep -q "| FAIL"
