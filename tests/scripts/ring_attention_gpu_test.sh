#!/usr/bin/env bash
# workloads/ring_attention on the GPUs there are. Skips (77) where there is no GPU.
#  1. The block kernel (bench/block_bench.cu verify) against the fp32 reference at small shapes,
#     causal and not, Hkv 8 and 32: the whole sequence in one call, and split the ring's way on one
#     GPU (P = 2 and 4, contiguous and zig-zag, state carried between calls, finalize inline and as
#     its own kernel); both forms of the kernel (RING_ATTENTION_ROW_TILES 1, the workload's, and 2);
#     `block_bench steps`: the bound's one call and the ring's per-step calls give the same output.
#  2. The seed, gen0 and every bench/variants.txt program under the frozen harness (--mode verify:
#     every rank's output against the unsplit reference) at S = 2048, Hkv 8 and 32, causal and not,
#     on P = 1 and, with 2 or more GPUs, P = 2.
# Usage: ring_attention_gpu_test.sh [build dir]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo "SKIP: no GPU (nvidia-smi -L lists none)"; exit 77; fi
source "$root/scripts/gpu-env.sh"
[ -z "$braid_gpu_env_missing" ] || { echo "FAIL: not found: $braid_gpu_env_missing"; exit 1; }
work=${1:-$root/build}/ring-attention-gpu-test
wl=$root/workloads/ring_attention
rm -rf "$work/results"
mkdir -p "$work/nccl-link" "$work/results"
ln -sf "$BRAID_NCCL_LIB/libnccl.so.2" "$work/nccl-link/libnccl.so"
flags="-O3 -std=c++20 --expt-relaxed-constexpr -arch=sm_90 -I$root/device/include -I$wl -I$BRAID_NCCL_INCLUDE"
link="-L$work/nccl-link -lnccl -Xlinker -rpath,$BRAID_NCCL_LIB"

# --- sources: block_bench, seed, gen0, the variants
cp "$wl/bench/block_bench.cu" "$work/block_bench.cu"
cp "$wl/seed.cu" "$work/seed.cu"
cp "$wl/gen0.cu" "$work/gen0.cu"
names=(seed gen0)
while read -r name knobs; do
  case "$name" in ""|\#*) continue;; esac
  # shellcheck disable=SC2086
  python3 "$root/workloads/gemm_allgather/bench/make_variant.py" "$wl/gen0.cu" "$work/$name.cu" $knobs || { echo "FAIL: variant $name"; exit 1; }
  names+=("$name")
done <"$wl/bench/variants.txt"
cp "$wl/bench/block_bench.cu" "$work/block_bench_rt2.cu"
sed -i '1i #define RING_ATTENTION_ROW_TILES 2' "$work/block_bench_rt2.cu"
rm -f "$work/failed-builds"
# shellcheck disable=SC2086
printf '%s\n' block_bench block_bench_rt2 "${names[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  "'$BRAID_NVCC' $flags '$work/{}.cu' -o '$work/{}' $link >'$work/{}.build.log' 2>&1 || echo {} >>'$work/failed-builds'"
if [ -s "$work/failed-builds" ]; then
  for f in $(cat "$work/failed-builds"); do echo "FAIL: build of $f"; tail -5 "$work/$f.build.log"; done
  exit 1
fi

# --- 1. the kernel
"$work/block_bench" verify || { echo "FAIL: block kernel against the reference"; exit 1; }
"$work/block_bench_rt2" verify || { echo "FAIL: block kernel (two row tiles) against the reference"; exit 1; }
# The bound's one call and a ring's per-step calls do the same work (outputs compared per rank).
"$work/block_bench" steps --seqs 2048 --hkv 8 --causal 0,1 --ranks 2,4 --iters 2 --warmup 1 ||
  { echo "FAIL: block_bench steps: per-step output differs from the one call's"; exit 1; }

# --- 2. the programs under the harness
gpus=$(nvidia-smi -L | grep -c '^GPU')
worlds="1"
[ "$gpus" -ge 2 ] && worlds="1 2"
sizes="--size 204808 --size 204832 --size 1000204808 --size 1000204832"
failed=0 runs=0
for P in $worlds; do
  for name in "${names[@]}"; do
    dir=$work/results/P$P-$name
    mkdir -p "$dir"
    eval_dir=$(mktemp -d)
    pids=()
    for ((r = 0; r < P; r++)); do
      # shellcheck disable=SC2086
      BRAID_RANK=$r BRAID_WORLD_SIZE=$P BRAID_LOCAL_RANK=$r BRAID_RUN_ID=ring-$name-$P BRAID_EVAL_DIR=$eval_dir \
        timeout -k 5 180 "$work/$name" --mode verify --seed 7 --rtol 0.02 --atol 0.004 $sizes --results_dir "$dir" >"$dir/rank$r.log" 2>&1 &
      pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    rm -rf "$eval_dir"
    runs=$((runs + 1))
    if [ $rc = 0 ] && grep -q '"correct": *true' "$dir/correct.json" 2>/dev/null; then
      echo "PASS P=$P $name"
    else
      failed=$((failed + 1))
      echo "FAIL P=$P $name (rc=$rc): $(head -c 400 "$dir/rank0.log" | tr '\n' ' ')"
    fi
  done
done
echo "programs: $((runs - failed)) of $runs correct"
[ $failed = 0 ]
