#!/usr/bin/env bash
# On a machine with 2 or more GPUs: `braid run` of the gemm_allgather seed with the gate and 2
# generations, and the annotator's knob settings through the gate (tests/convert/annotate_gate_test.sh's
# driver), both on BRAID_GATE_RANKS ranks (default 2).
# Logs and the run under $OUT (default ./braid-run-gpu-out).
#   BRAID_BIN=path/to/braid  BRAID_ANNOTATE_DRIVER=path/to/annotate_gate_driver  scripts/braid-run-gpu.sh [run|gate|all]
# Binaries default to .device-carry/bin (scripts/bundle-for-device.sh), then build/ and build/tests.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-$root/braid-run-gpu-out}
mkdir -p "$out"
pick() { for c in "$@"; do [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }; done; }
braid=$(pick "${BRAID_BIN:-}" "$root/.device-carry/bin/braid" "$root/build/braid")
driver=$(pick "${BRAID_ANNOTATE_DRIVER:-}" "$root/.device-carry/bin/annotate_gate_driver" "$root/build/tests/annotate_gate_driver")
source scripts/gpu-env.sh
# Binaries built on another machine find this checkout's device headers and prompts.
export BRAID_DEVICE_INCLUDE=${BRAID_DEVICE_INCLUDE:-$root/device/include} BRAID_PROMPTS_DIR=${BRAID_PROMPTS_DIR:-$root/prompts}
nvidia-smi -L
mode=${1:-all}
if [ "$mode" != run ]; then
  [ -n "$driver" ] || { echo "no annotate_gate_driver (build the target or set BRAID_ANNOTATE_DRIVER)"; exit 1; }
  start=$(date +%s)
  pids=()
  for f in tests/convert/corpus/*.cu workloads/gemm_allgather/seed.cu; do
    n=$(basename "$f" .cu); [ "$n" = seed ] && n=gemm_allgather
    # In parallel on the same GPUs: checks correctness; the times are not measurements.
    timeout -k 5 "${BRAID_ANNOTATE_GATE_TIMEOUT:-300}" "$driver" "$out/annotate-gate" "$f" >"$out/annotate-gate-$n.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  echo "== annotate gate ($(( $(date +%s) - start ))s)"
  cat "$out"/annotate-gate-*.log | grep -E "^(PASS|FAIL)"
  grep -L "^PASS" "$out"/annotate-gate-*.log | while read -r l; do echo "== $l"; tail -5 "$l"; done
fi
if [ "$mode" != gate ]; then
  [ -n "$braid" ] || { echo "no braid binary (set BRAID_BIN)"; exit 1; }
  start=$(date +%s)
  rm -rf "$out/gag-run"
  timeout -k 10 "${BRAID_RUN_TIMEOUT:-400}" "$braid" run workloads/gemm_allgather/seed.cu -o "$out/gag-run" -g 2 -j 1 --seed 1 --ranks "${BRAID_GATE_RANKS:-2}" >"$out/braid-run.log" 2>&1
  echo "== braid run rc=$? in $(( $(date +%s) - start ))s"
  grep -v "^\[" "$out/braid-run.log" | tail -25
  "$braid" top "$out/gag-run" 2>&1 | head -12
  "$braid" report "$out/gag-run" -o "$out/gag-report.html" >/dev/null 2>&1 && echo "report: $out/gag-report.html"
fi
