#!/usr/bin/env bash
# Evaluations-to-target of the GEMM + AllGather goal on a machine with 2 GPUs: one knob-mutator
# `braid evolve` per RNG seed, each stopping at the first verified program whose slowest size is
# within 1.05x of its bound (workloads/gemm_allgather/bench/goal.yaml), at most 60 evaluations,
# then the per-seed tables of workloads/gemm_allgather/bench/evolve_summary.py.
#   scripts/gemm-allgather-goal.sh [seeds...]        (default: 1 2 3)
#   BRAID_GOAL_RANKS=4 (default: workload.yaml's 2)  BRAID_BIN=path/to/braid  BRAID_GOAL_EVALS=60  BRAID_GOAL_TIMEOUT=560 (seconds per seed; one device call
#   allows at most 600 s, so run one seed per call there)
# CUDA and NCCL as scripts/gpu-env.sh finds them; results under $OUT (or ./gemm-allgather-goal-out).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-$root/gemm-allgather-goal-out}
mkdir -p "$out"
source scripts/gpu-env.sh
braid=${BRAID_BIN:-}
for c in "$braid" "$root/.device-carry/bin/braid" "$root/build/braid"; do
  if [ -n "$c" ] && [ -x "$c" ]; then braid=$c; break; fi
done
[ -x "$braid" ] || { echo "FAIL: no braid binary (BRAID_BIN, .device-carry/bin/braid or build/braid)"; exit 1; }
export LD_LIBRARY_PATH="$(dirname "$braid")/lib:$LD_LIBRARY_PATH"
seeds=${*:-1 2 3}
for seed in $seeds; do
  dir=$out/seed$seed
  rm -rf "$dir"
  start=$(date +%s)
  timeout -k 10 "${BRAID_GOAL_TIMEOUT:-560}" "$braid" evolve workloads/gemm_allgather --llm none \
    -g "${BRAID_GOAL_EVALS:-60}" -s "$seed" -r "$dir" ${BRAID_GOAL_RANKS:+--ranks "$BRAID_GOAL_RANKS"} \
    -c workloads/gemm_allgather/bench/goal.yaml >"$out/seed$seed.log" 2>&1
  rc=$?
  echo "seed $seed: rc=$rc in $(( $(date +%s) - start ))s; $(grep -o 'target reached[^]]*' "$out/seed$seed.log" | tail -1)"
  python3 workloads/gemm_allgather/bench/evolve_summary.py "$dir" --target 1.05 >"$out/seed$seed.md" 2>&1
  tail -2 "$out/seed$seed.md"
done
