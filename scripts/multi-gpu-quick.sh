#!/usr/bin/env bash
# A short multi-GPU pass for a machine held briefly (4 or 8 GPUs of one node), from binaries built
# elsewhere (scripts/bundle-for-device.sh): the primitive and harness tests and the all-gather
# bench (--quick) at one rank per GPU, one goal evolve of gemm_allgather, PyTorch's fused op at the
# goal sizes, and the evaluation cascade. At most 8 files under $OUT (some machines return no more).
#   scripts/multi-gpu-quick.sh
#   BRAID_QUICK_RANKS=N (default: GPUs rounded down to 2, 4 or 8)  BRAID_QUICK_GOAL_TIMEOUT=230
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-$root/multi-gpu-out}
mkdir -p "$out"
source scripts/gpu-env.sh
bin=$root/.device-carry/bin
gpus=$(nvidia-smi -L | wc -l)
ranks=${BRAID_QUICK_RANKS:-$(( gpus >= 8 ? 8 : gpus >= 4 ? 4 : 2 ))}
log=$out/check.log
step() {
  local name=$1 limit=$2 start
  shift 2
  start=$(date +%s)
  echo "== $name" >>"$log"
  timeout -k 5 "$limit" "$@" >>"$log" 2>&1
  echo "$name: rc=$? in $(( $(date +%s) - start ))s" | tee -a "$out/summary.txt"
}
{ nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -10; echo "ranks $ranks"; } >>"$log"
step primitives 45 "$bin/gpu_test_primitives"
step harness 45 "$bin/gpu_test_harness"
step bench_allgather 60 bash -c "'$bin/bench_allgather' --min_mib 1 --max_mib 1024 --reps 11 --quick --csv '$out/allgather.csv' > '$out/bench.log' 2>&1"
goal=$(mktemp -d)
BRAID_GOAL_RANKS=$ranks BRAID_GOAL_TIMEOUT=${BRAID_QUICK_GOAL_TIMEOUT:-230} OUT=$goal \
  step goal_evolve $(( ${BRAID_QUICK_GOAL_TIMEOUT:-230} + 20 )) scripts/gemm-allgather-goal.sh 1
cp "$goal/seed1.md" "$goal/seed1.log" "$out/" 2>/dev/null
step torch_fused 80 python3 -m torch.distributed.run --standalone --nproc_per_node="$ranks" workloads/gemm_allgather/bench/torch_fused.py \
  --sizes 4096,8192,16384 --iters 20 --warmup 3 --out "$out/torch.json"
step cascade 90 "$bin/gpu_cascade_test" --source_dir "$root" --out "$(mktemp -d)" --ranks "$ranks"
grep -h "rank 0:\|ALL PASSED\|FAIL" "$log" | head -20
grep -h "^PASS\|^FAIL\|quarantined" "$log" | tail -12
grep -h "^|" "$out/bench.log"
tail -3 "$out/seed1.md" 2>/dev/null
cat "$out/summary.txt"
