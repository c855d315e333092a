#!/usr/bin/env bash
# Ring attention benchmark (workloads/ring_attention).
#
# BRAID_RING_RANKS=1 (the default with one GPU): the block kernel (attention_block.cuh) over the
# whole sequence in one call against PyTorch's scaled_dot_product_attention (flash backend) at the
# same shapes in the same run: S 8192..65536, Hq 32, Hkv 8 and 32, causal and not, bf16, CUDA-event
# medians. First checks the kernel against the fp32 reference at small shapes (block_bench verify).
# Prints a table with both TFLOP/s and the ratio (the issue needs >= 0.7 of PyTorch); exit 1 when
# the check fails or the ratio is short. The kernel's two-row-tile form (attention_block.cuh,
# RING_ATTENTION_ROW_TILES=2) is checked and timed beside it (extra columns). About 2 minutes on one
# H100.
#
# BRAID_RING_RANKS=P >= 2: the seed, gen0 and bench/variants.txt under the frozen harness on P GPUs
# (every rank's output verified against the unsplit reference), one results folder per program, then
# the table (bench/table.py): seed, all-gather baseline, compute alone, ring alone, bound, the best
# verified program, its ratio to the bound and its speedups.
#
#   scripts/bench-ring-attention.sh
#   BRAID_RING_SEQS=8192,16384,32768,65536   (P = 1) sequence lengths
#   BRAID_RING_HKV=8,32  BRAID_RING_CAUSAL=0,1 BRAID_RING_ITERS=10 BRAID_RING_WARMUP=3
#   BRAID_RING_SIZES=...                     (P >= 2) harness sizes (see ring_attention.cuh)
#   BRAID_RING_VARIANTS="a b"                (P >= 2) only these lines of variants.txt
# Logs and results go to $OUT (or ./ring-attention-out). CUDA and NCCL as scripts/gpu-env.sh finds them.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
wl=$root/workloads/ring_attention
out=${OUT:-$root/ring-attention-out}
build=${BRAID_RING_BUILD:-$root/build-ring-bench}
iters=${BRAID_RING_ITERS:-10}
warmup=${BRAID_RING_WARMUP:-3}
mkdir -p "$out" "$build"
: >"$out/bench.log"
log() { echo "$*" | tee -a "$out/bench.log"; }

source scripts/gpu-env.sh
[ -z "$braid_gpu_env_missing" ] || { log "FAIL: not found: $braid_gpu_env_missing"; exit 1; }
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$gpus" -ge 2 ]; then ranks=${BRAID_RING_RANKS:-2}; else ranks=${BRAID_RING_RANKS:-1}; fi
log "== $(nvidia-smi -L 2>/dev/null | head -1) x$gpus; nvcc $BRAID_NVCC; ranks $ranks"
[ "$gpus" -ge 1 ] || { log "FAIL: no GPU"; exit 1; }
[ "$gpus" -ge "$ranks" ] || { log "FAIL: $ranks ranks need $ranks GPUs, found $gpus"; exit 1; }
mkdir -p "$build/nccl-link"
ln -sf "$BRAID_NCCL_LIB/libnccl.so.2" "$build/nccl-link/libnccl.so"
nvcc_flags=(-O3 -std=c++20 --expt-relaxed-constexpr -lineinfo -arch=sm_90 -I"$root/device/include" -I"$wl" -I"$BRAID_NCCL_INCLUDE")
nccl_link=(-L"$build/nccl-link" -lnccl -Xlinker -rpath,"$BRAID_NCCL_LIB")

if [ "$ranks" = 1 ]; then
  seqs=${BRAID_RING_SEQS:-8192,16384,32768,65536}
  hkv=${BRAID_RING_HKV:-8,32}
  causal=${BRAID_RING_CAUSAL:-0,1}
  # The workload's kernel (block_bench) and its two-row-tile form (block_bench_rt2), both checked
  # against the reference first, then timed.
  start=$(date +%s)
  rm -f "$build/block_bench" "$build/block_bench_rt2"
  for rt in 1 2; do
    bin=$build/block_bench; [ $rt = 2 ] && bin=$build/block_bench_rt2
    "$BRAID_NVCC" "${nvcc_flags[@]}" -DRING_ATTENTION_ROW_TILES=$rt "$wl/bench/block_bench.cu" -o "$bin" "${nccl_link[@]}" >"$out/build-rt$rt.log" 2>&1 &
  done
  wait
  [ -x "$build/block_bench" ] && [ -x "$build/block_bench_rt2" ] || { log "FAIL: build of block_bench (see $out/build-rt*.log)"; exit 1; }
  log "build: block_bench, block_bench_rt2 in $(( $(date +%s) - start ))s"
  args=(--seqs "$seqs" --hkv "$hkv" --causal "$causal" --iters "$iters" --warmup "$warmup")
  : >"$out/kernel.log"
  for bin in block_bench block_bench_rt2; do
    "$build/$bin" verify >"$out/verify-$bin.log" 2>&1
    vrc=$?
    log "verify $bin: $(tail -1 "$out/verify-$bin.log")"
    if [ $vrc != 0 ]; then
      grep FAIL "$out/verify-$bin.log" | head -5 | tee -a "$out/bench.log"
      [ $bin = block_bench ] && exit 1
      continue  # the two-row-tile form is only timed when it is right
    fi
    start=$(date +%s)
    timeout -k 5 "${BRAID_RING_TIMEOUT:-180}" "$build/$bin" bench "${args[@]}" >>"$out/kernel.log" 2>&1
    log "$bin: rc=$? in $(( $(date +%s) - start ))s"
  done
  start=$(date +%s)
  timeout -k 5 "${BRAID_RING_TIMEOUT:-180}" python3 "$wl/bench/torch_sdpa.py" "${args[@]}" >"$out/torch.log" 2>&1
  log "torch: rc=$? in $(( $(date +%s) - start ))s $(head -1 "$out/torch.log")"
  python3 "$wl/bench/kernel_table.py" "$out/kernel.log" "$out/torch.log" | tee "$out/table.md"
  exit "${PIPESTATUS[0]}"
fi

# --- P >= 2: programs under the frozen harness
sizes=${BRAID_RING_SIZES:-819232,1000819232,1638408,1001638408}
make_variant=$root/workloads/gemm_allgather/bench/make_variant.py
declare -a names=(seed gen0_default)
cp "$wl/seed.cu" "$build/seed.cu"
cp "$wl/gen0.cu" "$build/gen0_default.cu"
while read -r name knobs; do
  case "$name" in ""|\#*) continue;; esac
  if [ -n "${BRAID_RING_VARIANTS:-}" ] && ! [[ " $BRAID_RING_VARIANTS " == *" $name "* ]]; then continue; fi
  # shellcheck disable=SC2086
  python3 "$make_variant" "$wl/gen0.cu" "$build/$name.cu" $knobs || { log "FAIL: variant $name"; continue; }
  names+=("$name")
done <"$wl/bench/variants.txt"
start=$(date +%s)
rm -f "$build/failed-builds"
printf '%s\n' "${names[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  "'$BRAID_NVCC' ${nvcc_flags[*]} '$build/{}.cu' -o '$build/{}' ${nccl_link[*]} >'$out/build-{}.log' 2>&1 || echo {} >>'$build/failed-builds'"
log "build: ${#names[@]} programs in $(( $(date +%s) - start ))s; failed: $(cat "$build/failed-builds" 2>/dev/null | tr '\n' ' ')"
results=$out/results
rm -rf "$results"
mkdir -p "$results"
size_args=""
for s in ${sizes//,/ }; do size_args="$size_args --size $s"; done
for name in "${names[@]}"; do
  dir=$results/$name
  mkdir -p "$dir"
  [ -x "$build/$name" ] || continue
  eval_dir=$(mktemp -d)
  start=$(date +%s)
  pids=()
  for ((r = 0; r < ranks; r++)); do
    # shellcheck disable=SC2086
    BRAID_RANK=$r BRAID_WORLD_SIZE=$ranks BRAID_LOCAL_RANK=$r BRAID_RUN_ID=$name BRAID_EVAL_DIR=$eval_dir \
      timeout -k 5 "${BRAID_RING_RUN_TIMEOUT:-400}" "$build/$name" --mode bench --seed 1 --rtol 0.02 --atol 0.004 \
      --warmup 2 --iters "$iters" $size_args --results_dir "$dir" >"$dir/rank$r.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  rm -rf "$eval_dir"
  log "$name: rc=$rc in $(( $(date +%s) - start ))s $(head -c 300 "$dir/rank0.log" | tr '\n' ' ')"
done
python3 "$wl/bench/table.py" "$results" | tee "$out/table.md"
