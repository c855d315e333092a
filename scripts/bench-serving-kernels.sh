#!/usr/bin/env bash
# Serving-kernel benchmark (workloads/serving_kernels/<op>) on one GPU: builds gen0 (the default
# knobs) and, where given, a best program per op; runs each under the frozen harness (which times
# the seed and the copy bound in the same run, interleaved); times PyTorch eager and torch.compile
# of the same ops when torch is importable; prints per op and shape: copy, seed, gen0, best, eager,
# compile and the ratios (best's fraction of the copy rate, best vs torch.compile, best vs seed).
#
#   scripts/bench-serving-kernels.sh [--quick]     --quick: 2 shapes per op (decode-sized and the
#                                                  largest), fewer iterations (~1.5 min)
#   scripts/bench-serving-kernels.sh --verify [N]  correctness only: seed, gen0 and N (default 4)
#                                                  other valid knob vectors per op (the first sets
#                                                  every knob to its last value where allowed), each
#                                                  verified once at every shape; one line each, then
#                                                  "verify: P of T correct"
#   BRAID_SK_OPS="add_rmsnorm softmax"             ops (default: all four)
#   BRAID_SK_BEST_<op>=path.cu                     the best program of an op (`braid export RUN -o f.cu`)
#   BRAID_SK_BEST_<op>="kThreads=256 kVec=8"       ... or a knob vector of its gen0.cu
#   BRAID_SK_EVOLVE=60 BRAID_BIN=build/braid       first a knob-mutator evolve of that many evaluations
#                                                  per op (seed BRAID_SK_EVOLVE_SEED, default 1); its best
#                                                  program is the op's best
#   BRAID_SK_TORCH=0                               skip PyTorch (BRAID_SK_COMPILE=0: eager only)
#   BRAID_SK_ITERS=30 BRAID_SK_WARMUP=5
# Logs and results go to $OUT (or ./serving-kernels-out); the table is printed last and saved as
# table.md. CUDA and NCCL as scripts/gpu-env.sh finds them.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
family=$root/workloads/serving_kernels
out=${OUT:-$root/serving-kernels-out}
quick=0
verify=0
case "${1:-}" in
  --quick) quick=1 ;;
  --verify) verify=1; samples=${2:-4} ;;
  "") ;;
  *) echo "usage: $0 [--quick | --verify [N]]" >&2; exit 2 ;;
esac
ops=${BRAID_SK_OPS:-add_rmsnorm silu_mul rope softmax}
iters=${BRAID_SK_ITERS:-$([ $quick = 1 ] && echo 20 || echo 30)}
warmup=${BRAID_SK_WARMUP:-5}
build=${BRAID_SK_BUILD:-$root/build-serving-bench}
mkdir -p "$out" "$build"
results=$out/results
rm -rf "$results"
mkdir -p "$results"
: >"$out/bench.log"
log() { echo "$*" | tee -a "$out/bench.log"; }

# No GPU: say so and exit 77 (ctest's skip code for the serving_kernels_verify test).
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo "SKIP: no GPU (nvidia-smi -L lists none)"; exit 77; fi
source scripts/gpu-env.sh
[ -z "$braid_gpu_env_missing" ] || { log "FAIL: not found: $braid_gpu_env_missing"; exit 1; }
mkdir -p "$build/nccl-link"
ln -sf "$BRAID_NCCL_LIB/libnccl.so.2" "$build/nccl-link/libnccl.so"
log "== $(nvidia-smi -L 2>/dev/null | head -1); nvcc $BRAID_NVCC; ops: $ops; quick=$quick"

# The sizes of an op: its workload.yaml's --size values; --quick keeps the first and the last.
sizes_of() {
  local all
  all=$(grep -E '^\s*args:' "$family/$1/workload.yaml" | grep -oE -- '--size [0-9]+' | awk '{print $2}')
  if [ $quick = 1 ]; then all=$(printf '%s\n' $all | sed -n '1p;$p' | sort -un); fi
  echo $all
}
tolerances_of() { grep -E '^\s*args:' "$family/$1/workload.yaml" | grep -oE -- '--(rtol|atol) [^ "]+' | tr '\n' ' '; }

# --- optional evolve first: its best program becomes the op's best
if [ $verify = 0 ] && [ "${BRAID_SK_EVOLVE:-0}" -gt 0 ]; then
  braid=${BRAID_BIN:-$root/build/braid}
  for op in $ops; do
    run_dir=$out/evolve-$op
    rm -rf "$run_dir"
    start=$(date +%s)
    timeout -k 10 "${BRAID_SK_EVOLVE_TIMEOUT:-900}" "$braid" evolve "$family/$op" --llm none -g "$BRAID_SK_EVOLVE" \
      -s "${BRAID_SK_EVOLVE_SEED:-1}" -r "$run_dir" >"$out/evolve-$op.log" 2>&1
    log "evolve $op: rc=$? in $(( $(date +%s) - start ))s ($BRAID_SK_EVOLVE evaluations)"
    if "$braid" export "$run_dir" -o "$build/evolved_$op.cu" >>"$out/bench.log" 2>&1; then
      eval "BRAID_SK_BEST_$op=\$build/evolved_$op.cu"
    fi
  done
fi

# --- sources: gen0 (defaults) and best per op
jobs=()
for op in $ops; do
  [ -d "$family/$op" ] || { log "FAIL: no workload $family/$op"; continue; }
  mkdir -p "$build/$op"
  cp "$family/$op/gen0.cu" "$build/$op/gen0.cu"
  jobs+=("$op/gen0")
  if [ $verify = 1 ]; then
    cp "$family/$op/seed.cu" "$build/$op/seed.cu"
    jobs+=("$op/seed")
    i=0
    while read -r knobs; do
      i=$((i + 1))
      # shellcheck disable=SC2086
      python3 "$root/workloads/gemm_allgather/bench/make_variant.py" "$family/$op/gen0.cu" "$build/$op/sample$i.cu" $knobs \
        && echo "$knobs" >"$build/$op/sample$i.knobs" && jobs+=("$op/sample$i")
    done < <(python3 "$family/bench/sample_knobs.py" "$family/$op/gen0.cu" "$samples" "${BRAID_SK_SAMPLE_SEED:-1}")
    continue
  fi
  best_var="BRAID_SK_BEST_$op"
  best=${!best_var:-}
  if [ -n "$best" ]; then
    if [ -f "$best" ]; then
      cp "$best" "$build/$op/best.cu" && jobs+=("$op/best")
    else
      # shellcheck disable=SC2086
      python3 "$root/workloads/gemm_allgather/bench/make_variant.py" "$family/$op/gen0.cu" "$build/$op/best.cu" $best \
        && jobs+=("$op/best") || log "FAIL: $op: knob vector '$best'"
    fi
  fi
done

# --- build in parallel
start=$(date +%s)
rm -f "$build/failed-builds"
printf '%s\n' "${jobs[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  "op=\$(dirname {}); '$BRAID_NVCC' -O3 -std=c++20 --expt-relaxed-constexpr -lineinfo -arch=sm_90 -I'$root/device/include' \
   -I'$family/'\$op -I'$family/common' -I'$BRAID_NCCL_INCLUDE' '$build/{}.cu' -o '$build/{}' -L'$build/nccl-link' -lnccl \
   -Xlinker -rpath,'$BRAID_NCCL_LIB' >'$build/{}.build.log' 2>&1 || echo {} >>'$build/failed-builds'"
log "build: ${#jobs[@]} programs in $(( $(date +%s) - start ))s; failed: $(cat "$build/failed-builds" 2>/dev/null | tr '\n' ' ')"
for f in $(cat "$build/failed-builds" 2>/dev/null); do tail -5 "$build/$f.build.log" | tee -a "$out/bench.log"; done

# --- verify only: one run per program in --mode verify, every shape
if [ $verify = 1 ]; then
  ok=0
  for job in "${jobs[@]}"; do
    op=$(dirname "$job")
    dir=$results/$job
    mkdir -p "$dir"
    if [ ! -x "$build/$job" ]; then log "$job: BUILD FAILED ($build/$job.build.log)"; continue; fi
    size_args=""
    for s in $(sizes_of "$op"); do size_args="$size_args --size $s"; done
    eval_dir=$(mktemp -d)
    # shellcheck disable=SC2046
    BRAID_RANK=0 BRAID_WORLD_SIZE=1 BRAID_LOCAL_RANK=0 BRAID_RUN_ID=${job//\//_} BRAID_EVAL_DIR=$eval_dir \
      timeout -k 5 "${BRAID_SK_RUN_TIMEOUT:-180}" "$build/$job" --mode verify --seed "${BRAID_SK_SAMPLE_SEED:-1}" $(tolerances_of "$op") \
      $size_args --results_dir "$dir" >"$dir/rank0.log" 2>&1
    rc=$?
    rm -rf "$eval_dir"
    [ $rc = 0 ] && ok=$((ok + 1))
    log "$job: rc=$rc $(tr '\n' ' ' <"$dir/rank0.log" | head -c 400) $(cat "$build/$job.knobs" 2>/dev/null)"
  done
  log "verify: $ok of ${#jobs[@]} correct"
  [ $ok = ${#jobs[@]} ]
  exit
fi

# --- run: one process per program (1 rank), every size verified
for job in "${jobs[@]}"; do
  op=$(dirname "$job")
  [ -x "$build/$job" ] || continue
  dir=$results/$job
  mkdir -p "$dir"
  size_args=""
  for s in $(sizes_of "$op"); do size_args="$size_args --size $s"; done
  eval_dir=$(mktemp -d)
  start=$(date +%s)
  # shellcheck disable=SC2046
  BRAID_RANK=0 BRAID_WORLD_SIZE=1 BRAID_LOCAL_RANK=0 BRAID_RUN_ID=${job//\//_} BRAID_EVAL_DIR=$eval_dir \
    timeout -k 5 "${BRAID_SK_RUN_TIMEOUT:-180}" "$build/$job" --mode bench --seed 1 $(tolerances_of "$op") \
    --warmup "$warmup" --iters "$iters" --input_sets 2 $size_args --results_dir "$dir" >"$dir/rank0.log" 2>&1
  log "$job: rc=$? in $(( $(date +%s) - start ))s $(head -c 300 "$dir/rank0.log" | tr '\n' ' ')"
  rm -rf "$eval_dir"
done

# --- PyTorch eager and torch.compile, when torch is present
torch_json=$out/torch.json
rm -f "$torch_json"
if [ "${BRAID_SK_TORCH:-1}" != 0 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  torch_sizes=()
  for op in $ops; do torch_sizes+=(--sizes "$op=$(sizes_of "$op" | tr ' ' ',')"); done
  start=$(date +%s)
  timeout -k 5 "${BRAID_SK_TORCH_TIMEOUT:-300}" python3 "$family/bench/torch_ops.py" --ops "$(echo $ops | tr ' ' ',')" "${torch_sizes[@]}" \
    --iters "$iters" --warmup "$warmup" $([ "${BRAID_SK_COMPILE:-1}" = 0 ] && echo --no-compile) --out "$torch_json" >"$out/torch.log" 2>&1
  log "torch eager / torch.compile: rc=$? in $(( $(date +%s) - start ))s"
else
  log "torch: not run (BRAID_SK_TORCH=0, or torch with CUDA missing)"
fi

python3 "$family/bench/table.py" "$results" --torch "$torch_json" | tee "$out/table.md"
