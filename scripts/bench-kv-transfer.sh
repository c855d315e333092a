#!/usr/bin/env bash
# KV-cache transfer benchmark (workloads/kv_transfer) on one machine: builds the seed, gen0 and the
# hand-picked knob settings of workloads/kv_transfer/bench/variants.txt (plus a knob vector or
# evolved programs given), runs each under the frozen harness on P ranks (pairs prefill -> decode;
# P = 1 puts both on one GPU), optionally runs a knob-mutator `braid evolve` first, and prints per
# shape: seed, host baseline, projections alone, transfer alone, bound, the best verified program,
# its ratio to the bound, its speedup over the seed, and the exposed transfer (time minus
# projections alone: what the decode rank waits for after the last layer's compute).
#
#   scripts/bench-kv-transfer.sh
#   BRAID_KV_SHAPES=40961024,163842048   shapes, size = S*10000 + D (+ L*10^9 when L != 32); default
#                                        the issue's nine: S 1024/4096/16384 x D 512/1024/2048, L 32
#   BRAID_KV_RANKS=2                     ranks, one GPU each (default 2 with >= 2 GPUs, else 1)
#   BRAID_KV_VARIANTS="a b"              only these lines of variants.txt ("none": seed and extras only)
#   BRAID_KV_KNOBS="kEngine=Engine::CopyEngine kDirection=Direction::Pull ..."
#                                        one more gen0 setting, benched as "given"
#   BRAID_KV_EXTRA="best=path.cu ..."    more programs (e.g. `braid export` of an evolve run)
#   BRAID_KV_EVOLVE=N BRAID_KV_EVOLVE_SEEDS="1 2 3" BRAID_BIN=path/to/braid
#                                        a knob-mutator evolve of N evaluations per seed, first
#                                        (its best program is benched beside the others)
#   BRAID_KV_EVOLVE_CONFIG=workloads/kv_transfer/bench/goal.yaml
#                                        overlay for the evolve: stop at the goal (1.10x bound)
#   BRAID_KV_ITERS=20 BRAID_KV_WARMUP=3
# Logs and results go to $OUT (or ./kv-transfer-out); the table is printed last and saved as
# table.md. CUDA and NCCL as scripts/gpu-env.sh finds them.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
wl=$root/workloads/kv_transfer
out=${OUT:-$root/kv-transfer-out}
shapes=${BRAID_KV_SHAPES:-10240512,10241024,10242048,40960512,40961024,40962048,163840512,163841024,163842048}
iters=${BRAID_KV_ITERS:-20}
warmup=${BRAID_KV_WARMUP:-3}
build=${BRAID_KV_BUILD:-$root/build-kv-bench}
mkdir -p "$out" "$build"
results=$out/results
rm -rf "$results"
mkdir -p "$results"
: >"$out/bench.log"
log() { echo "$*" | tee -a "$out/bench.log"; }

source scripts/gpu-env.sh
[ -z "$braid_gpu_env_missing" ] || { log "FAIL: not found: $braid_gpu_env_missing"; exit 1; }
# Link against the library the ranks will load (a wheel ships only libnccl.so.2).
mkdir -p "$build/nccl-link"
ln -sf "$BRAID_NCCL_LIB/libnccl.so.2" "$build/nccl-link/libnccl.so"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$gpus" -ge 2 ]; then ranks=${BRAID_KV_RANKS:-2}; else ranks=${BRAID_KV_RANKS:-1}; fi
log "== $(nvidia-smi -L 2>/dev/null | head -1) x$gpus; nvcc $BRAID_NVCC; NCCL lib $BRAID_NCCL_LIB, headers $BRAID_NCCL_INCLUDE; shapes $shapes; ranks $ranks"
[ "$gpus" -ge "$ranks" ] || { log "FAIL: $ranks ranks need $ranks GPUs, found $gpus"; exit 1; }
[ "$ranks" = 1 ] && log "one rank: prefill and decode on one GPU; the transfer is a copy to itself, the paged re-layout is verified and timed"

# --- optional evolve first: its best program joins the comparison
extra=${BRAID_KV_EXTRA:-}
if [ "${BRAID_KV_EVOLVE:-0}" -gt 0 ]; then
  braid=${BRAID_BIN:-$root/build/braid}
  for seed in ${BRAID_KV_EVOLVE_SEEDS:-1}; do
    run_dir=$out/evolve-seed$seed
    rm -rf "$run_dir"
    start=$(date +%s)
    timeout -k 10 "${BRAID_KV_EVOLVE_TIMEOUT:-1800}" "$braid" evolve "$wl" --llm none \
      -g "$BRAID_KV_EVOLVE" -s "$seed" -r "$run_dir" --ranks "$ranks" ${BRAID_KV_EVOLVE_CONFIG:+-c "$BRAID_KV_EVOLVE_CONFIG"} >"$out/evolve-seed$seed.log" 2>&1
    log "evolve seed $seed: rc=$? in $(( $(date +%s) - start ))s ($BRAID_KV_EVOLVE evaluations)"
    # Evaluations to target at the evolve's shapes (workload.yaml: args + bench_args).
    python3 "$root/workloads/gemm_allgather/bench/evolve_summary.py" "$run_dir" --target 1.10 --sizes 40961024,10242048,163842048 \
      >"$out/evolve-seed$seed.md" 2>&1 && grep -E "^(target|stop_when|not confirmed)" "$out/evolve-seed$seed.md" | tee -a "$out/bench.log"
    if "$braid" export "$run_dir" -o "$build/evolved_seed$seed.cu" >>"$out/bench.log" 2>&1; then extra="$extra evolved_seed$seed=$build/evolved_seed$seed.cu"; fi
  done
fi

# --- sources
declare -a names=()
make_variant=$root/workloads/gemm_allgather/bench/make_variant.py
cp "$wl/seed.cu" "$build/seed.cu"
names+=(seed)
while read -r name knobs; do
  case "$name" in ""|\#*) continue;; esac
  if [ -n "${BRAID_KV_VARIANTS:-}" ] && ! [[ " $BRAID_KV_VARIANTS " == *" $name "* ]]; then continue; fi
  # shellcheck disable=SC2086
  python3 "$make_variant" "$wl/gen0.cu" "$build/$name.cu" $knobs || { log "FAIL: variant $name"; continue; }
  names+=("$name")
done <"$wl/bench/variants.txt"
if [ -n "${BRAID_KV_KNOBS:-}" ]; then
  # shellcheck disable=SC2086
  python3 "$make_variant" "$wl/gen0.cu" "$build/given.cu" $BRAID_KV_KNOBS && names+=(given) || log "FAIL: BRAID_KV_KNOBS"
fi
for item in $extra; do
  name=${item%%=*}
  cp "${item#*=}" "$build/$name.cu" && names+=("$name")
done

# --- build in parallel
start=$(date +%s)
rm -f "$build/failed-builds"
printf '%s\n' "${names[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  "'$BRAID_NVCC' -O3 -std=c++20 --expt-relaxed-constexpr -lineinfo -arch=sm_90 -I'$root/device/include' -I'$wl' -I'$BRAID_NCCL_INCLUDE' \
   '$build/{}.cu' -o '$build/{}' -L'$build/nccl-link' -lnccl -lcublas -Xlinker -rpath,'$BRAID_NCCL_LIB' >'$out/build-{}.log' 2>&1 \
   || echo {} >>'$build/failed-builds'"
log "build: ${#names[@]} programs in $(( $(date +%s) - start ))s; failed: $(cat "$build/failed-builds" 2>/dev/null | tr '\n' ' ')"

# --- run: one process per rank, the harness's BRAID_* bootstrap; bit-exact verification
size_args=""
for s in ${shapes//,/ }; do size_args="$size_args --size $s"; done
for name in "${names[@]}"; do
  dir=$results/$name
  mkdir -p "$dir"
  [ -x "$build/$name" ] || continue
  eval_dir=$(mktemp -d)
  start=$(date +%s)
  pids=()
  for ((r = 0; r < ranks; r++)); do
    BRAID_RANK=$r BRAID_WORLD_SIZE=$ranks BRAID_LOCAL_RANK=$r BRAID_RUN_ID=$name BRAID_EVAL_DIR=$eval_dir \
      timeout -k 5 "${BRAID_KV_RUN_TIMEOUT:-400}" "$build/$name" --mode bench --seed 1 --rtol 0 --atol 0 \
      --warmup "$warmup" --iters "$iters" --input_sets 2 $size_args --results_dir "$dir" >"$dir/rank$r.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  rm -rf "$eval_dir"
  log "$name: rc=$rc in $(( $(date +%s) - start ))s $(head -c 300 "$dir/rank0.log" | tr '\n' ' ')"
done

python3 "$wl/bench/table.py" "$results" ${BRAID_KV_KNOBS:+--best given} | tee "$out/table.md"
