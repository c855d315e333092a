#!/usr/bin/env bash
# MoE benchmark (workloads/moe) on one machine: builds the seed, gen0 and the knob settings of
# workloads/moe/bench/variants.txt (plus any programs given), runs each under the frozen harness
# on P ranks at DeepSeek-V3 shapes (E = 256 routed experts, T = 128 and 4096 tokens per rank, skews
# 1:1 2:1 3:1 5:1), and prints per size: seed, best verified program, bound (expert compute of the
# most loaded rank alone vs its exchange alone, same run), best / bound, speedup. With one GPU it
# also runs the expert GEMM bench (grouped cuBLAS against plain dense cuBLAS).
#
#   scripts/bench-moe.sh
#   BRAID_MOE_RANKS=2                 ranks, one GPU each (default: 2, or 1 on a 1-GPU machine)
#   BRAID_MOE_EXPERTS=256             routed experts E (E/P >= 8)
#   BRAID_MOE_TOKENS="128 4096"       tokens per rank
#   BRAID_MOE_SKEWS="1 2 3 5"
#   BRAID_MOE_VARIANTS="a b"          only these lines of variants.txt ("none": seed and gen0 only)
#   BRAID_MOE_EXTRA="best=path.cu"    more programs (e.g. `braid export` of an evolve run)
#   BRAID_MOE_ITERS=10 BRAID_MOE_WARMUP=2
# Logs and results go to $OUT (or ./moe-out); the table is printed last and saved as table.md.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
wl=$root/workloads/moe
out=${OUT:-$root/moe-out}
build=${BRAID_MOE_BUILD:-$root/build-moe-bench}
iters=${BRAID_MOE_ITERS:-10}
warmup=${BRAID_MOE_WARMUP:-2}
experts=${BRAID_MOE_EXPERTS:-256}
mkdir -p "$out" "$build"
results=$out/results
rm -rf "$results"
mkdir -p "$results"
log() { echo "$*" | tee -a "$out/bench.log"; }

source scripts/gpu-env.sh
[ -z "$braid_gpu_env_missing" ] || { log "FAIL: not found: $braid_gpu_env_missing"; exit 1; }
mkdir -p "$build/nccl-link"
ln -sf "$BRAID_NCCL_LIB/libnccl.so.2" "$build/nccl-link/libnccl.so"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
ranks=${BRAID_MOE_RANKS:-$(( gpus >= 2 ? 2 : 1 ))}
log "== $(nvidia-smi -L 2>/dev/null | head -1) x$gpus; ranks $ranks; E $experts; nvcc $BRAID_NVCC; NCCL $BRAID_NCCL_LIB"
[ "$gpus" -ge "$ranks" ] || { log "FAIL: $ranks ranks need $ranks GPUs, found $gpus"; exit 1; }

# --- sources
declare -a names=(seed gen0)
cp "$wl/seed.cu" "$build/seed.cu"
cp "$wl/gen0.cu" "$build/gen0.cu"
while read -r name knobs; do
  case "$name" in ""|\#*) continue;; esac
  if [ -n "${BRAID_MOE_VARIANTS:-}" ] && ! [[ " $BRAID_MOE_VARIANTS " == *" $name "* ]]; then continue; fi
  # shellcheck disable=SC2086
  python3 "$root/workloads/gemm_allgather/bench/make_variant.py" "$wl/gen0.cu" "$build/$name.cu" $knobs || { log "FAIL: variant $name"; continue; }
  names+=("$name")
done <"$wl/bench/variants.txt"
for item in ${BRAID_MOE_EXTRA:-}; do
  name=${item%%=*}
  cp "${item#*=}" "$build/$name.cu" && names+=("$name")
done

# --- build in parallel (the expert GEMM bench too)
start=$(date +%s)
cp "$wl/bench/expert_gemm_bench.cu" "$build/expert_gemm_bench.cu"
printf '%s\n' "${names[@]}" expert_gemm_bench | xargs -P "$(nproc)" -I{} sh -c \
  "'$BRAID_NVCC' -O3 -std=c++20 --expt-relaxed-constexpr -lineinfo -arch=sm_90 -I'$root/device/include' -I'$wl' -I'$BRAID_NCCL_INCLUDE' \
   '$build/{}.cu' -o '$build/{}' -L'$build/nccl-link' -lnccl -lcublas -Xlinker -rpath,'$BRAID_NCCL_LIB' >'$out/build-{}.log' 2>&1 \
   || echo {} >>'$build/failed-builds'"
log "build: ${#names[@]} programs + expert_gemm_bench in $(( $(date +%s) - start ))s; failed: $(cat "$build/failed-builds" 2>/dev/null | tr '\n' ' ')"
rm -f "$build/failed-builds"

# --- the expert GEMM against plain cuBLAS (one GPU): rows per expert of decode and prefill
if [ -x "$build/expert_gemm_bench" ]; then
  per_rank=$(( experts / ranks ))
  CUDA_VISIBLE_DEVICES=0 timeout 300 "$build/expert_gemm_bench" "$per_rank" 8 64 256 512 2>&1 | tee "$out/expert-gemm.txt" | tee -a "$out/bench.log"
fi

# --- run: one process per rank, the harness's BRAID_* bootstrap
size_args=""
for t in ${BRAID_MOE_TOKENS:-128 4096}; do
  for s in ${BRAID_MOE_SKEWS:-1 2 3 5}; do size_args="$size_args --size $(( t * 10000 + experts * 10 + s ))"; done
done
for name in "${names[@]}"; do
  [ -x "$build/$name" ] || { mkdir -p "$results/$name"; continue; }
  dir=$results/$name
  mkdir -p "$dir"
  eval_dir=$(mktemp -d)
  start=$(date +%s)
  pids=()
  for ((r = 0; r < ranks; r++)); do
    BRAID_RANK=$r BRAID_WORLD_SIZE=$ranks BRAID_LOCAL_RANK=$r BRAID_RUN_ID=$name BRAID_EVAL_DIR=$eval_dir \
      timeout -k 5 "${BRAID_MOE_RUN_TIMEOUT:-900}" "$build/$name" --mode bench --seed 1 --rtol 0.02 --atol 0.05 \
      --warmup "$warmup" --iters "$iters" --input_sets 2 $size_args --results_dir "$dir" >"$dir/rank$r.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  rm -rf "$eval_dir"
  log "$name: rc=$rc in $(( $(date +%s) - start ))s $(head -c 300 "$dir/rank0.log" | tr '\n' ' ')"
done

python3 "$wl/bench/table.py" "$results" | tee "$out/table.md"
