#!/usr/bin/env bash
# GEMM + AllGather benchmark (workloads/gemm_allgather) on one machine with >= 2 GPUs: builds the
# seed, gen0 and the hand-picked knob settings of workloads/gemm_allgather/bench/variants.txt (plus
# any evolved programs given), runs each under the frozen harness on P ranks, optionally runs a
# short `braid evolve` and PyTorch's fused_all_gather_matmul, and prints per size: host sequential
# (cudaMalloc buffers and symmetric window), GEMM alone, all-gather alone, bound, the best verified
# program, ratio, speedup, and torch's fused op side by side.
#
#   scripts/bench-gemm-allgather.sh
#   BRAID_GAG_SIZES=4096,8192,16384      sizes (default 2048,4096,8192,16384); M x N x K as
#                                        M*10^10+N*10^5+K, e.g. 81921433608192 (8192 x 14336 x 8192)
#   BRAID_GAG_RANKS=2                    ranks, one GPU each (default 2)
#   BRAID_GAG_VARIANTS="a b"             only these lines of variants.txt ("none": seed only)
#   BRAID_GAG_EXTRA="best=path.cu ..."   more programs (e.g. `braid export` of an evolve run, or
#                                        rewrite=workloads/gemm_allgather/bench/rewrite_streamed.cu)
#   BRAID_GAG_RANKS=1 verifies programs on one GPU (no remote shards: every path but the transfer)
#   BRAID_GAG_EVOLVE=N BRAID_GAG_EVOLVE_SEEDS="1 2 3" BRAID_BIN=path/to/braid
#                                        a knob-mutator evolve of N evaluations per seed, first
#                                        (its best program is benched beside the others)
#   BRAID_GAG_EVOLVE_CONFIG=workloads/gemm_allgather/bench/goal.yaml
#                                        overlay for the evolve: stop at the goal (1.05x bound)
#   BRAID_GAG_TORCH=0                    skip PyTorch
#   BRAID_GAG_ITERS=20 BRAID_GAG_WARMUP=3
# Logs and results go to $OUT (or ./gemm-allgather-out); the table is printed last and saved as
# table.md. CUDA and NCCL as scripts/gpu-env.sh finds them.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
wl=$root/workloads/gemm_allgather
out=${OUT:-$root/gemm-allgather-out}
sizes=${BRAID_GAG_SIZES:-2048,4096,8192,16384}
ranks=${BRAID_GAG_RANKS:-2}
iters=${BRAID_GAG_ITERS:-20}
warmup=${BRAID_GAG_WARMUP:-3}
build=${BRAID_GAG_BUILD:-$root/build-gemm-bench}
mkdir -p "$out" "$build"
results=$out/results
rm -rf "$results"
mkdir -p "$results"
log() { echo "$*" | tee -a "$out/bench.log"; }

source scripts/gpu-env.sh
[ -z "$braid_gpu_env_missing" ] || { log "FAIL: not found: $braid_gpu_env_missing"; exit 1; }
# Link against the library the ranks will load (a wheel ships only libnccl.so.2).
mkdir -p "$build/nccl-link"
ln -sf "$BRAID_NCCL_LIB/libnccl.so.2" "$build/nccl-link/libnccl.so"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
log "== $(nvidia-smi -L 2>/dev/null | head -1) x$gpus; nvcc $BRAID_NVCC; NCCL lib $BRAID_NCCL_LIB, headers $BRAID_NCCL_INCLUDE; sizes $sizes; ranks $ranks"
[ "$gpus" -ge "$ranks" ] || { log "FAIL: $ranks ranks need $ranks GPUs, found $gpus"; exit 1; }

# --- optional evolve first: its best program joins the comparison
extra=${BRAID_GAG_EXTRA:-}
if [ "${BRAID_GAG_EVOLVE:-0}" -gt 0 ]; then
  braid=${BRAID_BIN:-$root/build/braid}
  for seed in ${BRAID_GAG_EVOLVE_SEEDS:-1}; do
    run_dir=$out/evolve-seed$seed
    rm -rf "$run_dir"
    start=$(date +%s)
    timeout -k 10 "${BRAID_GAG_EVOLVE_TIMEOUT:-1800}" "$braid" evolve "$wl" --llm none \
      -g "$BRAID_GAG_EVOLVE" -s "$seed" -r "$run_dir" --ranks "$ranks" ${BRAID_GAG_EVOLVE_CONFIG:+-c "$BRAID_GAG_EVOLVE_CONFIG"} >"$out/evolve-seed$seed.log" 2>&1
    log "evolve seed $seed: rc=$? in $(( $(date +%s) - start ))s ($BRAID_GAG_EVOLVE evaluations)"
    python3 "$wl/bench/evolve_summary.py" "$run_dir" --target 1.05 >"$out/evolve-seed$seed.md" 2>&1 && tail -2 "$out/evolve-seed$seed.md" | tee -a "$out/bench.log"
    if "$braid" export "$run_dir" -o "$build/evolved_seed$seed.cu" >>"$out/bench.log" 2>&1; then extra="$extra evolved_seed$seed=$build/evolved_seed$seed.cu"; fi
  done
fi

# --- sources
declare -a names=()
cp "$wl/seed.cu" "$build/seed.cu"
names+=(seed)
while read -r name knobs; do
  case "$name" in ""|\#*) continue;; esac
  if [ -n "${BRAID_GAG_VARIANTS:-}" ] && ! [[ " $BRAID_GAG_VARIANTS " == *" $name "* ]]; then continue; fi
  # shellcheck disable=SC2086
  python3 "$wl/bench/make_variant.py" "$wl/gen0.cu" "$build/$name.cu" $knobs || { log "FAIL: variant $name"; continue; }
  names+=("$name")
done <"$wl/bench/variants.txt"
for item in $extra; do
  name=${item%%=*}
  cp "${item#*=}" "$build/$name.cu" && names+=("$name")
done

# --- build in parallel
start=$(date +%s)
printf '%s\n' "${names[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  "'$BRAID_NVCC' -O3 -std=c++20 --expt-relaxed-constexpr -lineinfo -arch=sm_90 -I'$root/device/include' -I'$wl' -I'$BRAID_NCCL_INCLUDE' \
   '$build/{}.cu' -o '$build/{}' -L'$build/nccl-link' -lnccl -lcublas -Xlinker -rpath,'$BRAID_NCCL_LIB' >'$out/build-{}.log' 2>&1 \
   || echo {} >>'$build/failed-builds'"
log "build: ${#names[@]} programs in $(( $(date +%s) - start ))s; failed: $(cat "$build/failed-builds" 2>/dev/null | tr '\n' ' ')"
rm -f "$build/failed-builds"

# --- run: one process per rank, the harness's BRAID_* bootstrap
size_args=""
for s in ${sizes//,/ }; do size_args="$size_args --size $s"; done
for name in "${names[@]}"; do
  [ -x "$build/$name" ] || { mkdir -p "$results/$name"; continue; }
  dir=$results/$name
  mkdir -p "$dir"
  eval_dir=$(mktemp -d)
  start=$(date +%s)
  pids=()
  for ((r = 0; r < ranks; r++)); do
    BRAID_RANK=$r BRAID_WORLD_SIZE=$ranks BRAID_LOCAL_RANK=$r BRAID_RUN_ID=$name BRAID_EVAL_DIR=$eval_dir \
      timeout -k 5 "${BRAID_GAG_RUN_TIMEOUT:-240}" "$build/$name" --mode bench --seed 1 --rtol 0.02 --atol 0.02 \
      --warmup "$warmup" --iters "$iters" --input_sets 2 $size_args --results_dir "$dir" >"$dir/rank$r.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  rm -rf "$eval_dir"
  log "$name: rc=$rc in $(( $(date +%s) - start ))s $(head -c 300 "$dir/rank0.log" | tr '\n' ' ')"
done

# --- PyTorch's fused op, when torch is present
torch_json=$out/torch.json
rm -f "$torch_json"
if [ "${BRAID_GAG_TORCH:-1}" != 0 ] && python3 -c 'import torch, torch.distributed._symmetric_memory' 2>/dev/null; then
  start=$(date +%s)
  timeout -k 5 "${BRAID_GAG_TORCH_TIMEOUT:-180}" python3 -m torch.distributed.run --standalone --nproc_per_node="$ranks" \
    "$wl/bench/torch_fused.py" --sizes "$sizes" --iters "$iters" --warmup "$warmup" --out "$torch_json" >"$out/torch.log" 2>&1
  log "torch fused_all_gather_matmul: rc=$? in $(( $(date +%s) - start ))s"
else
  log "torch: not run (BRAID_GAG_TORCH=0 or torch missing)"
fi

python3 "$wl/bench/table.py" "$results" --torch "$torch_json" | tee "$out/table.md"
