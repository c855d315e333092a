#!/usr/bin/env bash
# braid's one script for GPU machines: the GPU tests, the workload benchmarks, the goal searches,
# the gates, and the bundle that carries binaries built here to a machine without our -dev
# libraries. `scripts/gpu.sh help` lists every subcommand with its options. Options are flags; an
# environment variable named in the help is only a fallback (flag, then variable, then default).
# `--dry-run` prints the builds, rank launches and runs a subcommand would do, and runs none.
# Every subcommand runs in scripts/gpu-env.sh's environment (NVLink multicast off, CUDA and NCCL
# found, that NCCL on LD_LIBRARY_PATH).
# Options reach their variables through parse_opts (printf -v), which shellcheck cannot follow.
# shellcheck disable=SC2154
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
self=$root/scripts/gpu.sh
cd "$root" || exit 2
# shellcheck source=scripts/gpu-children.sh
source "$root/scripts/gpu-children.sh"
make_variant=$root/workloads/gemm_allgather/bench/make_variant.py

# ================================================================ options and help
# A subcommand's spec_<name> declares its options (opt: a flag with a value; switch: a flag alone;
# list: a flag that may repeat) and its time limits (limit). The help is printed from them.
commands=(
  "check|every GPU test and the benchmarks, from binaries carried in .device-carry/bin (else built here); a short table last"
  "bench gemm-allgather|GEMM + AllGather: seed, gen0 and variants.txt under the harness on P ranks, PyTorch's fused op beside them"
  "bench kv-transfer|KV-cache transfer prefill -> decode: seed, gen0, variants.txt and a knob vector vs the bound"
  "bench moe|MoE dispatch / experts / combine at DeepSeek-V3 shapes; with one GPU also the expert GEMM vs cuBLAS"
  "bench ring-attention|ranks 1: the block kernel vs PyTorch's flash SDPA; ranks >= 2: the programs under the harness"
  "bench serving-kernels|the four single-GPU serving ops: gen0 and best vs torch eager, torch.compile and the copy rate"
  "goal gemm-allgather|evaluations-to-target of the knob-mutator search (1.05x the bound), one evolve per RNG seed"
  "goal kv-transfer|the same for the KV-cache transfer (1.10x the bound at every timed shape); best exported for bench --extra"
  "goal moe|the same for MoE dispatch / experts / combine (1.10x the bound at every token count and skew)"
  "goal ring-attention|the same for ring attention (1.10x the bound at every timed shape)"
  "scale|evaluations per hour of the search with 1, 2, 4, 8 GPUs leased to R-rank evaluations, against the ideal linear line"
  "quick|a short pass for a machine held briefly: tests, all-gather bench, one goal search, torch's fused op, cascade"
  "gates|\`braid run\` of the gemm_allgather seed and the annotator's settings through the gate (MODE: run, gate or all)"
  "convert-gate|\`braid convert --verify\` of every corpus program, the gemm_allgather seed and the user corpus (differential gate) on local ranks; a table"
  "bundle|(on the build machine) stripped binaries, their non-system libraries and NCCL's device headers into .device-carry"
  "env|what scripts/gpu-env.sh finds: CUDA, NCCL headers and library"
)
opt_flags=() opt_vars=() opt_envs=() opt_defaults=() opt_kinds=() opt_helps=() limit_names=() limit_defaults=()
declare_opt() { opt_flags+=("$1"); opt_vars+=("$2"); opt_envs+=("$3"); opt_defaults+=("$4"); opt_kinds+=("$5"); opt_helps+=("$6"); }
opt() { declare_opt "$1" "$2" "$3" "$4" value "$5"; }
switch() { declare_opt "$1" "$2" "$3" 0 switch "$4"; }
list() { declare_opt "$1" "$2" "$3" "" list "$4"; }
limit() { limit_names+=("$1"); limit_defaults+=("$2"); }
common_opts() {  # default output folder
  opt --out out OUT "$1" "logs and results"
  switch --dry-run dry BRAID_GPU_DRY_RUN "print what would run; run nothing"
  opt --gpus dry_gpus BRAID_GPU_DRY_GPUS 2 "GPUs a dry run assumes (a real run counts CUDA_VISIBLE_DEVICES, else nvidia-smi -L)"
  list --timeout timeouts BRAID_GPU_TIMEOUTS "NAME=SECONDS (repeat, or comma-separated): the time limits below"
}

die() { echo "gpu.sh: $*" >&2; exit 2; }
fn_of() { local f=${1// /_}; echo "${f//-/_}"; }

usage_of() {  # subcommand: its synopsis, options and time limits
  local cmd=$1 line i flag
  for line in "${commands[@]}"; do [ "${line%%|*}" = "$cmd" ] && echo "scripts/gpu.sh $cmd [options]${synopsis:-}  -- ${line#*|}"; done
  for i in "${!opt_flags[@]}"; do
    flag=${opt_flags[$i]}
    [ "${opt_kinds[$i]}" = switch ] || flag="$flag V"
    printf '    %-20s %s' "$flag" "${opt_helps[$i]}"
    [ -n "${opt_defaults[$i]}" ] && [ "${opt_kinds[$i]}" != switch ] && printf ' (default %s)' "${opt_defaults[$i]}"
    [ -n "${opt_envs[$i]}" ] && printf ' [%s]' "${opt_envs[$i]}"
    echo
  done
  if [ ${#limit_names[@]} -gt 0 ]; then
    printf '    time limits (s):'
    for i in "${!limit_names[@]}"; do printf ' %s=%s' "${limit_names[$i]}" "${limit_defaults[$i]}"; done
    echo
  fi
}

load_spec() {  # subcommand
  opt_flags=() opt_vars=() opt_envs=() opt_defaults=() opt_kinds=() opt_helps=() limit_names=() limit_defaults=() synopsis=""
  "spec_$(fn_of "$1")"
}

usage() {
  echo "usage: scripts/gpu.sh <subcommand> [options]   (scripts/gpu.sh <subcommand> --help: one only)"
  echo "Options are flags; [VARIABLE] is the environment fallback of a flag not given. OUT is the"
  echo "output folder. Every subcommand also takes:"
  load_spec env
  usage_of env | grep -E '^    (--dry-run|--gpus|--timeout) '

  local line
  for line in "${commands[@]}"; do
    echo
    load_spec "${line%%|*}"
    usage_of "${line%%|*}" | grep -vE '^    (--dry-run|--gpus|--timeout) '
  done
}

# Sets every declared variable from its flag, else its environment variable, else its default;
# the other arguments are left in `positional`.
parse_opts() {  # cmd args...
  local cmd=$1 a i found env item known
  shift
  positional=()
  for i in "${!opt_vars[@]}"; do
    env=${opt_envs[$i]}
    if [ -n "$env" ] && [ -n "${!env:-}" ]; then printf -v "${opt_vars[$i]}" '%s' "${!env}"; else printf -v "${opt_vars[$i]}" '%s' "${opt_defaults[$i]}"; fi
  done
  local -A given=()
  for i in "${!opt_vars[@]}"; do [ "${opt_vars[$i]}" = timeouts ] && timeouts_index=$i; done
  while [ $# -gt 0 ]; do
    a=$1
    shift
    case $a in -h | --help) usage_of "$cmd"; exit 0 ;; --) positional+=("$@"); break ;; esac
    found=""
    for i in "${!opt_flags[@]}"; do
      if [ "$a" = "${opt_flags[$i]}" ]; then found=$i; break; fi
      if [[ $a == "${opt_flags[$i]}="* ]]; then found=$i; set -- "${a#*=}" "$@"; break; fi
    done
    if [ -z "$found" ]; then
      case $a in -*) die "unknown option $a (scripts/gpu.sh $cmd --help)" ;; esac
      positional+=("$a")
      continue
    fi
    case ${opt_kinds[$found]} in
      switch) printf -v "${opt_vars[$found]}" 1 ;;
      value) [ $# -gt 0 ] || die "${opt_flags[$found]} needs a value"; printf -v "${opt_vars[$found]}" '%s' "$1"; shift ;;
      list)
        [ $# -gt 0 ] || die "${opt_flags[$found]} needs a value"
        # A repeated flag adds to the list; the first one replaces the environment's.
        [ -n "${given[$found]:-}" ] || printf -v "${opt_vars[$found]}" '%s' ""
        given[$found]=1
        item=${!opt_vars[$found]}
        printf -v "${opt_vars[$found]}" '%s' "${item:+$item$'\n'}$1"
        shift
        ;;
    esac
  done
  # Limits from the environment may be another subcommand's (a caller's BRAID_GPU_TIMEOUTS):
  # only flags are checked.
  [ -n "${given[$timeouts_index]:-}" ] || return 0
  for item in ${timeouts//,/ }; do
    known=0
    for i in "${!limit_names[@]}"; do [ "${item%%=*}" = "${limit_names[$i]}" ] && known=1; done
    [ $known = 1 ] && [[ ${item#*=} =~ ^[0-9]+$ ]] && continue
    die "--timeout $item: not NAME=SECONDS with a NAME of: ${limit_names[*]:-none}"
  done
}

limit_of() {  # name: seconds
  local item i
  for item in ${timeouts//,/ }; do [ "${item%%=*}" = "$1" ] && { echo "${item#*=}"; return; }; done
  for i in "${!limit_names[@]}"; do [ "${limit_names[$i]}" = "$1" ] && { echo "${limit_defaults[$i]}"; return; }; done
  die "no time limit named $1"
}

# ================================================================ shared steps
show() { printf '+'; printf ' %q' "$@"; }
# Runs a command, or prints it in a dry run.
x() { if [ "$dry" = 1 ]; then show "$@"; echo; else "$@"; fi; }
# Runs a command under a time limit, its output to a log (a dry run prints it).
run_to() {  # log seconds command...
  local log=$1 secs=$2
  shift 2
  if [ "$dry" = 1 ]; then echo "$(show timeout "$secs" "$@") >$log"; return 0; fi
  timed -k 10 "$secs" "$@" >"$log" 2>&1
}
logfile=""
log() { if [ "$dry" = 1 ] || [ -z "$logfile" ]; then echo "$*"; else echo "$*" | tee -a "$logfile"; fi; }
make_dir() { [ "$dry" = 1 ] || mkdir -p "$@"; }
fresh_dir() { [ "$dry" = 1 ] || { rm -rf "$1" && mkdir -p "$1"; }; }
since() { echo "$(($(date +%s) - $1))s"; }

# The GPUs this run may use: CUDA_VISIBLE_DEVICES's entries where it is set (a machine shared out by
# GPU), else every GPU nvidia-smi lists (nvidia-smi itself ignores CUDA_VISIBLE_DEVICES).
gpu_count() {
  if [ "$dry" = 1 ]; then echo "$dry_gpus"; return; fi
  local all; all=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    local -a names; IFS=, read -r -a names <<<"$CUDA_VISIBLE_DEVICES"
    echo $((${#names[@]} < all ? ${#names[@]} : all))
  else echo "$all"; fi
}
# Ranks for one rank per GPU: rounded down to 2, 4 or 8 (the gemm_allgather sizes split evenly over
# those only; 8 is the LSA limit of the primitives).
ranks_for() { echo $(($1 >= 8 ? 8 : $1 >= 4 ? 4 : 2)); }

# The environment of scripts/gpu-env.sh; a missing piece fails the subcommand (a dry run says so).
gpu_env() {
  # shellcheck source=scripts/gpu-env.sh
  source "$root/scripts/gpu-env.sh"
  [ -z "$braid_gpu_env_missing" ] && return 0
  if [ "$dry" = 1 ]; then echo "(dry run) not found here: $braid_gpu_env_missing"; return 0; fi
  log "FAIL: not found: $braid_gpu_env_missing"
  exit 1
}

# The first executable of the candidates (a dry run, finding none, names the first candidate).
pick() {
  local c
  for c in "$@"; do [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }; done
  [ "$dry" = 1 ] && for c in "$@"; do [ -n "$c" ] && { echo "$c"; return; }; done
}
braid_binary() { pick "${1:-}" "$root/.device-carry/bin/braid" "$root/build/braid"; }

# One process per rank on this machine with the harness's BRAID_* bootstrap (rank r on GPU r),
# each under the time limit, output to DIR/rank<r>.log; the status is the last non-zero one.
launch_ranks() {  # id ranks seconds dir command...
  local id=$1 ranks=$2 secs=$3 dir=$4 eval_dir r p rc=0 pids=()
  shift 4
  if [ "$dry" = 1 ]; then
    echo "+ ranks 0..$((ranks - 1)): BRAID_RANK=r BRAID_WORLD_SIZE=$ranks BRAID_LOCAL_RANK=r BRAID_RUN_ID=$id$(show timeout "$secs" "$@" | cut -c2-) >$dir/rank<r>.log"
    return 0
  fi
  mkdir -p "$dir"
  eval_dir=$(mktemp -d)
  for ((r = 0; r < ranks; r++)); do
    BRAID_RANK=$r BRAID_WORLD_SIZE=$ranks BRAID_LOCAL_RANK=$r BRAID_RUN_ID=$id BRAID_EVAL_DIR=$eval_dir \
      timeout -k 5 "$secs" "$@" >"$dir/rank$r.log" 2>&1 &
    pids+=($!)
    child_groups+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  rm -rf "$eval_dir"
  return "$rc"
}

# Every program in `names` (built as BUILD/<name>) under the frozen harness on RANKS ranks, one
# results folder each; a line per program in the log.
bench_programs() {  # build results ranks seconds harness-args...
  local build=$1 results=$2 ranks=$3 secs=$4 name start rc
  shift 4
  for name in "${names[@]}"; do
    make_dir "$results/$name"
    [ "$dry" = 1 ] || [ -x "$build/$name" ] || continue
    start=$(date +%s)
    launch_ranks "$name" "$ranks" "$secs" "$results/$name" "$build/$name" "$@" --results_dir "$results/$name"
    rc=$?
    [ "$dry" = 1 ] || log "$name: rc=$rc in $(since "$start") $(head -c 300 "$results/$name/rank0.log" | tr '\n' ' ')"
  done
}

# Adds to `names` the lines of a variants.txt, each made from GEN0 by make_variant.py (only the
# names in FILTER when it is set; "none" matches no line).
add_variants() {  # build gen0 variants-file filter
  local build=$1 gen0=$2 file=$3 filter=$4 name knobs
  while read -r name knobs; do
    case "$name" in "" | \#*) continue ;; esac
    if [ -n "$filter" ] && ! [[ " $filter " == *" $name "* ]]; then continue; fi
    # shellcheck disable=SC2086
    x python3 "$make_variant" "$gen0" "$build/$name.cu" $knobs || { log "FAIL: variant $name"; continue; }
    names+=("$name")
  done <"$file"
}
add_extra() {  # build "name=path ..."
  local item src dst
  for item in $2; do
    src=${item#*=} dst=$1/${item%%=*}.cu
    # An evolve's export is already in place.
    if [ "$src" = "$dst" ] || [ "$src" -ef "$dst" ] || x cp "$src" "$dst"; then names+=("${item%%=*}"); fi
  done
}

# nvcc of BUILD/<name>.cu into BUILD/<name> for every name, nproc at a time, against the NCCL the
# ranks load. FLAGS_FN prints a name's extra compile flags, one a line; link_extra holds extra
# libraries. Logs: LOGS/build-<name>.log.
link_extra=()
build_programs() {  # build logs flags-fn name...
  local build=$1 logs=$2 flags_fn=$3 name start running=0 failed=() lg
  local -a flags cmd
  shift 3
  make_dir "$build/nccl-link" "$logs"
  # A wheel ships only libnccl.so.2: link against that file.
  [ "$dry" = 1 ] || ln -sf "$BRAID_NCCL_LIB/libnccl.so.2" "$build/nccl-link/libnccl.so"
  start=$(date +%s)
  for name in "$@"; do
    mapfile -t flags < <("$flags_fn" "$name")
    # shellcheck disable=SC2054
    cmd=("$BRAID_NVCC" -O3 -std=c++20 --expt-relaxed-constexpr -lineinfo -arch=sm_90 -I"$root/device/include" "${flags[@]}"
      -I"$BRAID_NCCL_INCLUDE" "$build/$name.cu" -o "$build/$name" -L"$build/nccl-link" -lnccl "${link_extra[@]}"
      -Xlinker -rpath,"$BRAID_NCCL_LIB")
    lg=$logs/build-${name//\//_}.log
    if [ "$dry" = 1 ]; then echo "$(show "${cmd[@]}") >$lg"; continue; fi
    rm -f "$build/$name"
    "${cmd[@]}" >"$lg" 2>&1 &
    running=$((running + 1))
    if [ $running -ge "$(nproc)" ]; then wait -n; running=$((running - 1)); fi
  done
  wait
  [ "$dry" = 1 ] && return 0
  for name in "$@"; do [ -x "$build/$name" ] || failed+=("$name"); done
  log "build: $# programs in $(since "$start"); failed: ${failed[*]}"
  for name in "${failed[@]}"; do tail -5 "$logs/build-${name//\//_}.log" | tee -a "$logfile"; done
}

# A knob-mutator `braid evolve` of EVALS evaluations per RNG seed, first; each run's best program
# (`braid export`) joins `extra` as evolved_seed<N>. SUMMARY_ARGS go to evolve_summary.py.
evolve_seeds() {  # workload braid ranks evals seeds config seconds build summary-args...
  local wl=$1 braid=$2 ranks=$3 evals=$4 seeds=$5 config=$6 secs=$7 build=$8 seed run_dir start rc
  shift 8
  for seed in $seeds; do
    run_dir=$out/evolve-seed$seed
    [ "$dry" = 1 ] || rm -rf "$run_dir"
    start=$(date +%s)
    run_to "$out/evolve-seed$seed.log" "$secs" "$braid" evolve "$wl" --llm none -g "$evals" -s "$seed" -r "$run_dir" \
      --ranks "$ranks" ${config:+-c "$config"}
    rc=$?
    [ "$dry" = 1 ] && { x "$braid" export "$run_dir" -o "$build/evolved_seed$seed.cu"; extra="$extra evolved_seed$seed=$build/evolved_seed$seed.cu"; continue; }
    log "evolve seed $seed: rc=$rc in $(since "$start") ($evals evaluations)"
    python3 "$root/workloads/gemm_allgather/bench/evolve_summary.py" "$run_dir" "$@" >"$out/evolve-seed$seed.md" 2>&1 &&
      grep -E "^(target|stop_when|not confirmed)" "$out/evolve-seed$seed.md" | tee -a "$logfile"
    if "$braid" export "$run_dir" -o "$build/evolved_seed$seed.cu" >>"$logfile" 2>&1; then
      extra="$extra evolved_seed$seed=$build/evolved_seed$seed.cu"
    fi
  done
}

# Output folder, bench.log, environment, GPU count, and RANKS checked against it.
bench_start() {  # (uses out) sets logfile, gpus
  make_dir "$out"
  logfile=$out/bench.log
  [ "$dry" = 1 ] || : >"$logfile"
  gpu_env
  gpus=$(gpu_count)
}
check_ranks() {  # ranks
  [ "$gpus" -ge "$1" ] || { log "FAIL: $1 ranks need $1 GPUs, found $gpus"; exit 1; }
}
machine_line() { [ "$dry" = 1 ] && echo "(dry run, $gpus GPUs)" || echo "$(nvidia-smi -L 2>/dev/null | head -1) x$gpus"; }

# Common options of the harness benchmarks; PREFIX names their environment fallbacks.
bench_opts() {  # prefix out-default build-default
  common_opts "$2"
  opt --build build "BRAID_$1_BUILD" "$3" "build folder of the programs"
}
variants_opt() {  # prefix
  opt --variants variants "BRAID_$1_VARIANTS" "" "only these lines of bench/variants.txt (space-separated; none: no line)"
}
evolve_opts() {  # prefix
  opt --evolve evolve "BRAID_$1_EVOLVE" 0 "first a knob-mutator evolve of N evaluations per seed; its best joins the table"
  opt --seeds seeds "BRAID_$1_EVOLVE_SEEDS" 1 "RNG seeds of that evolve"
  opt --config config "BRAID_$1_EVOLVE_CONFIG" "" "overlay for the evolve (bench/goal.yaml: stop at the goal)"
  opt --braid braid_bin BRAID_BIN "" "the braid binary (default .device-carry/bin/braid, build/braid)"
}

# ================================================================ check
spec_check() {
  common_opts gpu-check-out
  opt --prebuilt prebuilt BRAID_GPU_PREBUILT "" "binaries built elsewhere (default .device-carry/bin when there); built here when they cannot load"
  opt --bench-args bench_args BRAID_GPU_BENCH_ARGS "--min_mib 1 --max_mib 1024 --reps 15" "arguments of bench_allgather"
  switch --pack pack BRAID_GPU_PACK "leave only summary.txt, allgather.csv and gpu-check-logs.tar.gz in OUT"
  opt --ranks ranks_here BRAID_GAG_CHECK_RANKS "" "ranks of the cascade, evolve and gates (default: the GPUs, rounded down to 2, 4 or 8)"
  opt --gate-ranks gate_ranks BRAID_GATE_RANKS "" "ranks of the rewrite, annotate and braid run gates (default --ranks)"
  switch --gates-serial gates_serial BRAID_GPU_GATES_SERIAL "the rewrite and annotate gates one after another, not beside the convert gate"
  opt --evals evals BRAID_GAG_CHECK_EVALS 3 "evaluations of the gemm_allgather evolve"
  opt --braid braid_bin BRAID_BIN "" "braid binary (default: the prebuilt one, build/braid)"
  opt --cascade-bin cascade_bin BRAID_GPU_CASCADE_BIN "" "gpu_cascade_test (default: the prebuilt one, build-gpu-eval/)"
  opt --convert-bin convert_bin BRAID_CONVERT_BIN "" "braid with \`convert\` for the convert gate (default: --braid's, build/, build-convert/)"
  opt --convert-ranks convert_ranks BRAID_CONVERT_RANKS "" "ranks of the convert gate (default --ranks)"
  limit test 70; limit redteam 300; limit bench 120; limit gemm-probe 90; limit cascade 200; limit evolve 200
  limit rebench 120; limit rewrite-gate 200; limit annotate-gate 300; limit convert 200; limit braid-run 200
}
cmd_check() {
  local summary bin="" start rc gag_braid fp_start fp_pids=() hdr lib
  make_dir "$out"
  summary=$out/summary.txt
  [ "$dry" = 1 ] || : >"$summary"
  logfile=$summary
  note() { log "$*"; }
  # A section: its output to OUT/<name>.log, "name: rc=.. in ..s" to the summary.
  section() {  # name seconds command...
    local name=$1 secs=$2 start
    start=$(date +%s)
    shift 2
    run_to "$out/$name.log" "$secs" "$@"
    local rc=$?
    [ "$dry" = 1 ] || note "$name: rc=$rc in $(since "$start")"
    return 0
  }

  gpu_env
  if [ "$dry" = 0 ]; then
    {
      echo "== machine"; nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -8
      echo "nvcc: $BRAID_NVCC  nccl lib: $BRAID_NCCL_LIB  nccl include: $BRAID_NCCL_INCLUDE  wheel: ${BRAID_NCCL_WHEEL:-none}"
      python3 -c 'import importlib.metadata as m; print("nvidia-nccl wheel", m.version("nvidia-nccl-cu13"))' 2>/dev/null || true
      ls /sys/class/infiniband 2>/dev/null | head -3 | sed 's/^/rdma device: /'
    } 2>&1 | tee "$out/machine.log"
    if [ -n "$braid_gpu_env_missing" ]; then note "FAIL: not found: $braid_gpu_env_missing"; exit 1; fi
    hdr=$(sed -n 's/^#define NCCL_VERSION_CODE \([0-9]*\).*/\1/p' "$BRAID_NCCL_INCLUDE/nccl.h")
    lib=$(strings "$BRAID_NCCL_LIB/libnccl.so.2" 2>/dev/null | sed -n 's/^NCCL version \([0-9.]*\).*/\1/p' | head -1)
    note "NCCL headers $hdr, library ${lib:-unknown}"
    # Device-API structs are compiled into our binaries: a header/library mismatch is a build
    # error in spirit, so say it loudly.
    case "$lib" in 2.28.9*) ;; *) [ -n "$lib" ] && note "WARNING: NCCL library $lib differs from headers $hdr" ;; esac
  fi

  # Binaries: --prebuilt, or those scripts/gpu.sh bundle left in .device-carry/bin, when they load;
  # else device/ built here with CMake and nvcc alone.
  [ -z "$prebuilt" ] && [ -x "$root/.device-carry/bin/gpu_test_primitives" ] && prebuilt=$root/.device-carry/bin
  if [ -n "$prebuilt" ] && [ -x "$prebuilt/gpu_test_primitives" ] && ! ldd "$prebuilt/gpu_test_primitives" | grep -q "not found"; then
    bin=$prebuilt
    note "using prebuilt binaries in $bin"
  fi
  if [ -z "$bin" ]; then
    start=$(date +%s)
    if [ "$dry" = 1 ]; then
      x cmake -S device -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release
      x cmake --build build-gpu -j "$(nproc)"
    else
      cmake -S device -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >"$out/build.log" 2>&1 &&
        cmake --build build-gpu -j "$(nproc)" >>"$out/build.log" 2>&1
      rc=$?
      note "build: rc=$rc in $(since "$start")"
      if [ $rc -ne 0 ]; then tail -30 "$out/build.log"; exit 1; fi
      find build-gpu -maxdepth 3 -type f \( -name 'gpu_*' -o -name 'bench_*' \) -perm -u+x -exec cp -f {} build-gpu/ \; 2>/dev/null
    fi
    bin=$root/build-gpu
  fi

  section test_primitives "$(limit_of test)" "$bin/gpu_test_primitives"
  section test_harness "$(limit_of test)" "$bin/gpu_test_harness"
  section test_harness_report "$(limit_of test)" "$bin/gpu_test_harness_report"
  # Cheating GEMM + AllGather candidates against the harness (issue #17): 1 rank where they can, 2
  # where they must (skipped visibly on one GPU); one "REDTEAM name: verdict" line each.
  section test_redteam "$(limit_of redteam)" "$bin/gpu_test_redteam"
  # shellcheck disable=SC2086
  section bench_allgather "$(limit_of bench)" "$bin/bench_allgather" $bench_args --csv "$out/allgather.csv"
  # Where an overlapped GEMM + all-gather loses time: split GEMMs, copy-engine traffic, late
  # enqueue (a 2-GPU model on GPUs 0 and 1, whatever the machine has).
  section bench_gemm_split "$(limit_of gemm-probe)" "$bin/bench_gemm_split_probe" --reps 15

  # --- The GPU evaluation cascade: deadlock / illegal address / NaN / wrong rank candidates, each
  # followed by a correct one, through braid's own GpuCascadeEvaluator.
  gpus=$(gpu_count)
  ranks_here=${ranks_here:-$(ranks_for "$gpus")}
  cascade_bin=$(pick "$cascade_bin" "$bin/gpu_cascade_test" "$root/build-gpu-eval/tests/gpu/cascade/gpu_cascade_test")
  if [ -n "$cascade_bin" ]; then
    section gpu_cascade "$(limit_of cascade)" "$cascade_bin" --source_dir "$root" --out "$out/cascade" --ranks "$ranks_here"
    [ "$dry" = 1 ] || { echo "== cascade"; grep -h "^PASS\|^FAIL\|error:\|quarantined" "$out/gpu_cascade.log" | head -30; }
  else
    note "gpu_cascade: skipped (no gpu_cascade_test; build target gpu_cascade_test)"
  fi

  # --- gemm_allgather: a short knob-mutator evolve through the GPU cascade, its
  # evaluations-to-target table, then its two best programs re-measured with fresh inputs.
  gag_braid=$(pick "$braid_bin" "$bin/braid" "$root/build/braid")
  # The bundle's libraries, for the indirect dependencies too (libcurl's, say).
  [ -n "$gag_braid" ] && LD_LIBRARY_PATH="$(dirname "$gag_braid")/lib:$LD_LIBRARY_PATH" && export LD_LIBRARY_PATH
  if [ -n "$gag_braid" ] && [ "$gpus" -ge 2 ]; then
    [ "$dry" = 1 ] || rm -rf "$out/gemm-allgather-evolve"
    section gemm_allgather_evolve "$(limit_of evolve)" "$gag_braid" evolve workloads/gemm_allgather --llm none \
      -g "$evals" -s 1 --ranks "$ranks_here" -r "$out/gemm-allgather-evolve"
    if [ "$dry" = 1 ]; then
      x python3 workloads/gemm_allgather/bench/evolve_summary.py "$out/gemm-allgather-evolve" --target 1.05
    else
      python3 workloads/gemm_allgather/bench/evolve_summary.py "$out/gemm-allgather-evolve" --target 1.05 2>&1 |
        tee "$out/gemm_allgather_evolve.md" | tail -4
    fi
    section gemm_allgather_rebench "$(limit_of rebench)" "$gag_braid" rebench "$out/gemm-allgather-evolve" -n 2 --runs 2
    [ "$dry" = 1 ] || grep -v "\[info\]" "$out/gemm_allgather_rebench.log" | tail -4
  else
    note "gemm_allgather evolve: skipped (no braid binary or fewer than 2 GPUs)"
  fi

  # --- The rewrite gate (a scripted model's wrong rewrite caught, its fix accepted) and the
  # annotator's settings through the gate start here, in the background, beside the convert gate:
  # all three check correctness only and are dominated by nvcc. `braid run`, whose evolve
  # measures, runs after them, alone. Their rc lines go to summary.txt only.
  export BRAID_GATE_RANKS=${gate_ranks:-$ranks_here}
  if [ "$gpus" -ge 2 ]; then
    fp_start=$(date +%s)
    BRAID_REWRITE_GATE_DRIVER=$bin/rewrite_gate_driver \
      section rewrite_gate "$(limit_of rewrite-gate)" bash tests/convert/rewrite_gate_test.sh "$root/build" &
    fp_pids+=($!)
    [ "$gates_serial" = 1 ] || [ "$dry" = 1 ] && wait "$!"
    section annotate_gate "$(limit_of annotate-gate)" "$self" gates gate --out "$out/braid-run" \
      --annotate-driver "$bin/annotate_gate_driver" --ranks "$BRAID_GATE_RANKS" &
    fp_pids+=($!)
    [ "$gates_serial" = 1 ] || [ "$dry" = 1 ] && wait "$!"
  fi

  convert_gate "$(pick "$convert_bin" "${bin:+$bin/braid}" "$root/build/braid" "$root/build-convert/braid")" \
    "${convert_ranks:-$ranks_here}" "$(limit_of convert)" "$out/convert" 0 "$summary"

  # --- `braid run` of the gemm seed (convert, gate, annotate, 2 generations) with the GPUs to itself.
  if [ ${#fp_pids[@]} -gt 0 ]; then
    wait "${fp_pids[@]}"
    [ "$dry" = 1 ] || echo "== rewrite, annotate and convert gates ($(since "$fp_start"))"
    section braid_run "$(limit_of braid-run)" "$self" gates run --out "$out/braid-run" --braid "$(pick "$braid_bin" "$bin/braid")" \
      --ranks "$BRAID_GATE_RANKS"
    if [ "$dry" = 0 ]; then
      echo "== fast path part 2 ($(since "$fp_start"))"
      grep -h "^ok\|^not ok\|FAIL\|accepted" "$out/rewrite_gate.log" | head -12
      grep -h "^== \|^PASS\|^FAIL" "$out/annotate_gate.log" | head -40
      grep -h "^== \|gate:\|best" "$out/braid_run.log" | head -10
    fi
  else
    note "fast path part 2: skipped (fewer than 2 GPUs)"
  fi
  [ "$dry" = 1 ] && return 0

  # --- The short table, last.
  echo
  echo "== failures"
  grep -h "^FAIL\|SKIP\|error\|Error" "$out"/test_*.log | head -30
  echo "== harness"
  grep -h "^honest\|  -> \|rank 0:\|^SKIP" "$out/test_harness.log" | head -14
  grep -h "rank 0:" "$out/test_primitives.log"
  echo "== red team"
  grep -h "^REDTEAM\|rank 0:" "$out/test_redteam.log" | cut -c1-220
  echo "== benchmark"
  grep -h "^|" "$out/bench_allgather.log"
  grep -h "^S=" "$out/bench_gemm_split.log"
  echo "== summary"
  cat "$summary"

  # Every log in one archive; with --pack the loose copies go (the archive keeps them). Logs and
  # tables only: the build trees and run folders under OUT hold binaries too slow to compress.
  local archive
  archive=$(mktemp /tmp/gpu-check-logs.XXXXXX)
  (cd "$out" && find . -type f -size -8M \( -name '*.log' -o -name '*.md' -o -name '*.txt' -o -name '*.csv' -o -name '*.json' \
    -o -name '*.stderr' -o -name '*.stdout' -o -name '*.html' \) -print0 | tar czf "$archive" --null -T - && mv "$archive" "$out/gpu-check-logs.tar.gz") ||
    { rm -f "$archive"; echo "gpu-check: could not pack the logs" >&2; }
  if [ "$pack" = 1 ] && [ -f "$out/gpu-check-logs.tar.gz" ]; then
    find "$out" -mindepth 1 -maxdepth 1 ! -name gpu-check-logs.tar.gz ! -name summary.txt ! -name allgather.csv -exec rm -rf {} +
  fi

  # Exit status: 1 when any section failed (an rc other than 0, or 77 = skipped, in summary.txt).
  local failed_sections
  failed_sections=$(grep -E 'rc=[0-9]+' "$summary" | grep -vE 'rc=(0|77)([^0-9]|$)')
  if [ -n "$failed_sections" ]; then
    echo "== gpu-check FAILED:"
    echo "$failed_sections"
    exit 1
  fi
  echo "== gpu-check: every section passed"
}

# ================================================================ convert-gate
# Every corpus program (tests/convert/corpus) and the gemm_allgather seed converted by rules, the
# original and the conversion built and run on local ranks with the same random inputs, every
# rank's outputs compared; the table gives converted/original time (inputs ready -> outputs ready,
# or the harness's median candidate time). With a summary file, a failure adds an rc=1 line to it.
# The corpus (annotated), the gemm_allgather seed (harness) and the user corpus (no annotations:
# the differential gate, under mpirun for MPI programs); a program built with a macro that enables
# its NCCL path (`#ifdef MULTI_GPU`) or picks its type (`#ifdef USE_BF16`) gets it. Programs the
# converter leaves untouched on purpose (several ranks in one process, a background NCCL thread, a
# non-blocking communicator)
# are listed as such.
convert_gate_programs() {  # with-user-corpus  (only the names in $cg_programs, when set)
  local f
  {
    ls "$root"/tests/convert/corpus/*.cu "$root"/workloads/gemm_allgather/seed.cu
    [ "$1" = 1 ] && ls "$root"/tests/convert/corpus_user/*.cu
  } | while read -r f; do
    [ -z "${cg_programs:-}" ] || [[ " $cg_programs " == *" $(basename "$f" .cu) "* ]] && echo "$f"
  done
  return 0
}
convert_gate() {  # braid ranks seconds out-dir with-user-corpus [summary]
  local braid=$1 ranks=$2 secs=$3 cv_out=$4 user=$5 summary=${6:-} start f n line flags pids=() gate_failures=0
  if [ -z "$braid" ] || { [ "$dry" = 0 ] && ! "$braid" convert --help >/dev/null 2>&1; } || [ "$(gpu_count)" -lt 2 ]; then
    echo "convert gate: skipped (no braid with \`convert\`, or fewer than 2 GPUs)"
    return 0
  fi
  fresh_dir "$cv_out"
  start=$(date +%s)
  # Builds dominate: the programs go through the gate side by side (runs take seconds each), at most
  # --jobs at once: 79 gates at once on 2 x H100 ran NCCL out of device memory ("unhandled cuda
  # error" in ncclCommInitRank, originals hanging), where 2 x H200 had room for them.
  local running=0
  for f in $(convert_gate_programs "$user"); do
    n=$(basename "$f" .cu)
    flags=()
    grep -q '^#ifdef MULTI_GPU' "$f" && flags=(-DMULTI_GPU)
    grep -q '^#ifdef USE_BF16' "$f" && flags+=(-DUSE_BF16)
    grep -q '^#ifdef USE_FP16' "$f" && flags+=(-DUSE_FP16)
    [ -d "$(dirname "$f")/include" ] && flags+=(-I "$(dirname "$f")/include")  # the user corpus's own headers
    if [ "$dry" = 1 ]; then run_to "$cv_out/$n.log" "$secs" "$braid" convert "$f" "${flags[@]}" -o "$cv_out/$n.cu" --verify --ranks "$ranks" --gate-timeout "${gate_timeout:-300}" --work "$cv_out/$n.work"; continue; fi
    if [ "$running" -ge "${cg_jobs:-16}" ]; then wait -n; running=$((running - 1)); fi
    (
      end_children_with_me
      run_to "$cv_out/$n.log" "$secs" "$braid" convert "$f" "${flags[@]}" -o "$cv_out/$n.cu" --verify --ranks "$ranks" --gate-timeout "${gate_timeout:-300}" --work "$cv_out/$n.work"
      echo "$n $?" >>"$cv_out/rc.txt"
    ) &
    running=$((running + 1))
    pids+=($!)
    child_groups+=($!)
  done
  [ "$dry" = 1 ] && return 0
  wait "${pids[@]}"
  echo "== convert gate ($(since "$start"))"
  echo "| program | result | original | converted | ratio (or: buffers the original itself wrote differently in a second run) |"
  echo "|---|---|---|---|---|"
  for f in $(convert_gate_programs "$user"); do
    n=$(basename "$f" .cu)
    line=$(grep -h "^gate:\|^gate (differential" "$cv_out/$n.log" 2>/dev/null | head -1)
    if [[ $line == "gate:"* ]]; then
      echo "$line" | sed -E "s/gate: outputs match on ([0-9]+) ranks; original ([0-9.]+) ms, converted ([0-9.]+) ms, ratio ([0-9.]+)/| $n | PASS (\1 ranks) | \2 ms | \3 ms | \4 |/"
    elif [ -n "$line" ]; then
      echo "$line" | sed -E "s/gate \(differential, ([a-z]+)\): ([0-9]+) buffers match on ([0-9]+) ranks; wall time original ([0-9.]+) s, converted ([0-9.]+) s(; the original wrote (.*))?$/| $n | PASS (differential, \1, \2 buffers, \3 ranks) | \4 s | \5 s | \7 |/"
    elif grep -q "no NCCL call can be converted by rules" "$cv_out/$n.log" 2>/dev/null &&
      grep -q "several ranks in one process" "$cv_out/$n.log"; then
      echo "| $n | left untouched (several ranks in one process: expected) | | | |"
    elif grep -q "no NCCL call can be converted by rules" "$cv_out/$n.log" 2>/dev/null &&
      grep -q "one rank, a background thread" "$cv_out/$n.log"; then
      echo "| $n | left untouched (a background thread shares the communicator: expected) | | | |"
    elif grep -q "no NCCL call can be converted by rules" "$cv_out/$n.log" 2>/dev/null &&
      grep -q "created non-blocking" "$cv_out/$n.log"; then
      echo "| $n | left untouched (a non-blocking communicator: no symmetric windows; expected) | | | |"
    elif grep -q "no NCCL call can be converted by rules" "$cv_out/$n.log" 2>/dev/null; then
      echo "| $n | nothing converted by rules (host NCCL kept; the reasons are in $n.log) | | | |"
    else
      echo "| $n | FAIL: $(grep -h "braid:\|original does not\|differ" "$cv_out/$n.log" | head -1 | cut -c1-160) | | | |"
      gate_failures=$((gate_failures + 1))
    fi
  done
  [ -n "$summary" ] && awk '$2 != 0 {n++} END {if (n) print "convert gate: rc=1 (" n " programs exited non-zero; the untouched ones exit 2 by design)"}' "$cv_out/rc.txt" >>"$summary"
  for f in "$cv_out"/*.work/gate/converted/rank0.stderr; do
    [ -f "$f" ] && grep -h "braid_converted:" "$f" | sed "s|^|$(basename "$(dirname "$(dirname "$(dirname "$f")")")"): |"
  done
  # Non-zero only for a FAIL row (programs left untouched exit 2 by design).
  [ "$gate_failures" = 0 ]
}
spec_convert_gate() {
  common_opts convert-gate-out
  opt --braid braid_bin BRAID_CONVERT_BIN "" "braid with \`convert\` (default .device-carry/bin/braid, build/braid, build-convert/braid)"
  opt --ranks ranks BRAID_CONVERT_RANKS 2 "local ranks of every program"
  switch --no-user no_user BRAID_CONVERT_NO_USER "only the annotated corpus and the seed (gpu.sh check runs it so), not the user corpus"
  opt --jobs cg_jobs BRAID_CONVERT_JOBS 16 "programs in the gate at once (each builds two programs, then runs them on --ranks GPUs)"
  opt --programs cg_programs BRAID_CONVERT_PROGRAMS "" "only these programs (names without .cu, space-separated), e.g. to re-run the failures of a table"
  opt --gate-timeout gate_timeout BRAID_CONVERT_GATE_TIMEOUT 300 "seconds each side of a program may run in its gate (every program's gate runs at once, so a run waits for the GPUs)"
  limit convert 700
}
cmd_convert_gate() {
  gpu_env
  convert_gate "$(pick "$braid_bin" "$root/.device-carry/bin/braid" "$root/build/braid" "$root/build-convert/braid")" \
    "$ranks" "$(limit_of convert)" "$out" "$((1 - no_user))"
}

# ================================================================ gates
spec_gates() {
  common_opts braid-run-gpu-out
  synopsis=" [MODE]"
  opt --braid braid_bin BRAID_BIN "" "the braid binary (default .device-carry/bin/braid, build/braid)"
  opt --annotate-driver driver BRAID_ANNOTATE_DRIVER "" "annotate_gate_driver (default .device-carry/bin/, build/tests/)"
  opt --ranks ranks BRAID_GATE_RANKS 2 "ranks of both"
  limit annotate 300; limit run 400
}
cmd_gates() {
  local mode=${1:-all} start f n pids=()
  case $mode in run | gate | all) ;; *) die "gates: MODE is run, gate or all, not $mode" ;; esac
  local braid driver_bin
  braid=$(braid_binary "$braid_bin")
  driver_bin=$(pick "$driver" "$root/.device-carry/bin/annotate_gate_driver" "$root/build/tests/annotate_gate_driver")
  make_dir "$out"
  gpu_env
  # Binaries built on another machine find this checkout's device headers and prompts.
  export BRAID_DEVICE_INCLUDE=${BRAID_DEVICE_INCLUDE:-$root/device/include} BRAID_PROMPTS_DIR=${BRAID_PROMPTS_DIR:-$root/prompts}
  [ "$dry" = 1 ] || nvidia-smi -L
  if [ "$mode" != run ]; then
    [ -n "$driver_bin" ] || { echo "no annotate_gate_driver (build the target or give --annotate-driver)"; exit 1; }
    start=$(date +%s)
    for f in tests/convert/corpus/*.cu workloads/gemm_allgather/seed.cu; do
      n=$(basename "$f" .cu)
      [ "$n" = seed ] && n=gemm_allgather
      # In parallel on the same GPUs: checks correctness; the times are not measurements.
      BRAID_GATE_RANKS=$ranks run_to "$out/annotate-gate-$n.log" "$(limit_of annotate)" "$driver_bin" "$out/annotate-gate" "$f" &
      pids+=($!)
    done
    for f in "${pids[@]}"; do wait "$f"; done
    if [ "$dry" = 0 ]; then
      echo "== annotate gate ($(since "$start"))"
      cat "$out"/annotate-gate-*.log | grep -E "^(PASS|FAIL)"
      grep -L "^PASS" "$out"/annotate-gate-*.log | while read -r f; do echo "== $f"; tail -5 "$f"; done
    fi
  fi
  if [ "$mode" != gate ]; then
    [ -n "$braid" ] || { echo "no braid binary (give --braid)"; exit 1; }
    start=$(date +%s)
    [ "$dry" = 1 ] || rm -rf "$out/gag-run"
    run_to "$out/braid-run.log" "$(limit_of run)" "$braid" run workloads/gemm_allgather/seed.cu -o "$out/gag-run" -g 2 -j 1 --seed 1 --ranks "$ranks"
    local rc=$?
    [ "$dry" = 1 ] && return 0
    echo "== braid run rc=$rc in $(since "$start")"
    grep -v "^\[" "$out/braid-run.log" | tail -25
    "$braid" top "$out/gag-run" 2>&1 | head -12
    "$braid" report "$out/gag-run" -o "$out/gag-report.html" >/dev/null 2>&1 && echo "report: $out/gag-report.html"
  fi
}

# A bench's last step: its table.py over OUT/results (extra arguments passed on), printed and kept
# in OUT/table.md; a dry run only says it.
bench_table() {  # table.py [args...]
  local table=$1
  shift
  [ "$dry" = 1 ] && { x python3 "$table" "$out/results" "$@"; return 0; }
  python3 "$table" "$out/results" "$@" | tee "$out/table.md"
}

# ================================================================ bench gemm-allgather
spec_bench_gemm_allgather() {
  bench_opts GAG gemm-allgather-out build-gemm-bench
  variants_opt GAG
  opt --sizes sizes BRAID_GAG_SIZES 2048,4096,8192,16384 "M x N x K as M*10^10+N*10^5+K, e.g. 81921433608192; M alone: square"
  opt --ranks ranks BRAID_GAG_RANKS 2 "ranks, one GPU each (1: every path but the transfer)"
  opt --extra extra BRAID_GAG_EXTRA "" "more programs, NAME=PATH.cu ... (braid export of a run, bench/rewrite_streamed.cu)"
  evolve_opts GAG
  opt --torch torch BRAID_GAG_TORCH 1 "0: skip PyTorch's fused_all_gather_matmul"
  opt --iters iters BRAID_GAG_ITERS 20 "timed iterations"
  opt --warmup warmup BRAID_GAG_WARMUP 3 "warm-up iterations"
  limit run 240; limit evolve 1800; limit torch 180
}
flags_gemm_allgather() { echo "-I$root/workloads/gemm_allgather"; }
cmd_bench_gemm_allgather() {
  local wl=$root/workloads/gemm_allgather s size_args=() start torch_json
  bench_start
  log "== $(machine_line); nvcc $BRAID_NVCC; NCCL lib $BRAID_NCCL_LIB, headers $BRAID_NCCL_INCLUDE; sizes $sizes; ranks $ranks"
  check_ranks "$ranks"
  make_dir "$build"
  [ "$evolve" -gt 0 ] && evolve_seeds "$wl" "$(braid_binary "$braid_bin")" "$ranks" "$evolve" "$seeds" "$config" \
    "$(limit_of evolve)" "$build" --target 1.05
  names=(seed)
  x cp "$wl/seed.cu" "$build/seed.cu"
  add_variants "$build" "$wl/gen0.cu" "$wl/bench/variants.txt" "$variants"
  add_extra "$build" "$extra"
  link_extra=(-lcublas)
  build_programs "$build" "$out" flags_gemm_allgather "${names[@]}"
  for s in ${sizes//,/ }; do size_args+=(--size "$s"); done
  fresh_dir "$out/results"
  bench_programs "$build" "$out/results" "$ranks" "$(limit_of run)" --mode bench --seed 1 --rtol 0.02 --atol 0.02 \
    --warmup "$warmup" --iters "$iters" --input_sets 2 "${size_args[@]}"
  torch_json=$out/torch.json
  [ "$dry" = 1 ] || rm -f "$torch_json"
  if [ "$torch" != 0 ] && { [ "$dry" = 1 ] || python3 -c 'import torch, torch.distributed._symmetric_memory' 2>/dev/null; }; then
    start=$(date +%s)
    run_to "$out/torch.log" "$(limit_of torch)" python3 -m torch.distributed.run --standalone --nproc_per_node="$ranks" \
      "$wl/bench/torch_fused.py" --sizes "$sizes" --iters "$iters" --warmup "$warmup" --out "$torch_json"
    local rc=$?
    [ "$dry" = 1 ] || log "torch fused_all_gather_matmul: rc=$rc in $(since "$start")"
  else
    log "torch: not run (--torch 0 or torch missing)"
  fi
  bench_table "$wl/bench/table.py" --torch "$torch_json"
}

# ================================================================ bench kv-transfer
spec_bench_kv_transfer() {
  bench_opts KV kv-transfer-out build-kv-bench
  variants_opt KV
  opt --shapes shapes BRAID_KV_SHAPES 10240512,10241024,10242048,40960512,40961024,40962048,163840512,163841024,163842048 \
    "S*10000 + D (+ L*10^9 when L != 32)"
  opt --ranks ranks BRAID_KV_RANKS "" "ranks, one GPU each (default 2, or 1 on one GPU: both sides on it)"
  opt --knobs knobs BRAID_KV_KNOBS "" "one more gen0 knob vector, benched as \"given\" and shown as best"
  opt --extra extra BRAID_KV_EXTRA "" "more programs, NAME=PATH.cu ..."
  evolve_opts KV
  opt --iters iters BRAID_KV_ITERS 20 "timed iterations"
  opt --warmup warmup BRAID_KV_WARMUP 3 "warm-up iterations"
  limit run 400; limit evolve 1800
}
flags_kv_transfer() { echo "-I$root/workloads/kv_transfer"; }
cmd_bench_kv_transfer() {
  local wl=$root/workloads/kv_transfer s size_args=()
  bench_start
  ranks=${ranks:-$((gpus >= 2 ? 2 : 1))}
  log "== $(machine_line); nvcc $BRAID_NVCC; NCCL lib $BRAID_NCCL_LIB, headers $BRAID_NCCL_INCLUDE; shapes $shapes; ranks $ranks"
  check_ranks "$ranks"
  [ "$ranks" = 1 ] && log "one rank: prefill and decode on one GPU; the transfer is a copy to itself, the paged re-layout is verified and timed"
  make_dir "$build"
  # Evaluations to target at the evolve's shapes (workload.yaml: args + bench_args).
  [ "$evolve" -gt 0 ] && evolve_seeds "$wl" "$(braid_binary "$braid_bin")" "$ranks" "$evolve" "$seeds" "$config" \
    "$(limit_of evolve)" "$build" --target 1.10 --sizes 40961024,10242048,163842048
  names=(seed)
  x cp "$wl/seed.cu" "$build/seed.cu"
  add_variants "$build" "$wl/gen0.cu" "$wl/bench/variants.txt" "$variants"
  if [ -n "$knobs" ]; then
    # shellcheck disable=SC2086
    x python3 "$make_variant" "$wl/gen0.cu" "$build/given.cu" $knobs && names+=(given) || log "FAIL: --knobs $knobs"
  fi
  add_extra "$build" "$extra"
  link_extra=(-lcublas)
  build_programs "$build" "$out" flags_kv_transfer "${names[@]}"
  for s in ${shapes//,/ }; do size_args+=(--size "$s"); done
  fresh_dir "$out/results"
  # Bit-exact verification.
  bench_programs "$build" "$out/results" "$ranks" "$(limit_of run)" --mode bench --seed 1 --rtol 0 --atol 0 \
    --warmup "$warmup" --iters "$iters" --input_sets 2 "${size_args[@]}"
  bench_table "$wl/bench/table.py" ${knobs:+--best given}
}

# ================================================================ bench moe
spec_bench_moe() {
  bench_opts MOE moe-out build-moe-bench
  variants_opt MOE
  opt --ranks ranks BRAID_MOE_RANKS "" "ranks, one GPU each (default 2, or 1 on one GPU)"
  opt --experts experts BRAID_MOE_EXPERTS 256 "routed experts E (E / ranks >= 8)"
  opt --tokens tokens BRAID_MOE_TOKENS "128 4096" "tokens per rank"
  opt --skews skews BRAID_MOE_SKEWS "1 2 3 5" "load skews (most loaded : mean)"
  opt --extra extra BRAID_MOE_EXTRA "" "more programs, NAME=PATH.cu ..."
  opt --iters iters BRAID_MOE_ITERS 10 "timed iterations"
  opt --warmup warmup BRAID_MOE_WARMUP 2 "warm-up iterations"
  limit run 900; limit expert-gemm 300
}
flags_moe() { echo "-I$root/workloads/moe"; }
cmd_bench_moe() {
  local wl=$root/workloads/moe t s size_args=()
  bench_start
  ranks=${ranks:-$((gpus >= 2 ? 2 : 1))}
  log "== $(machine_line); ranks $ranks; E $experts; nvcc $BRAID_NVCC; NCCL $BRAID_NCCL_LIB"
  check_ranks "$ranks"
  make_dir "$build"
  names=(seed gen0)
  x cp "$wl/seed.cu" "$build/seed.cu"
  x cp "$wl/gen0.cu" "$build/gen0.cu"
  add_variants "$build" "$wl/gen0.cu" "$wl/bench/variants.txt" "$variants"
  add_extra "$build" "$extra"
  x cp "$wl/bench/expert_gemm_bench.cu" "$build/expert_gemm_bench.cu"
  link_extra=(-lcublas)
  build_programs "$build" "$out" flags_moe "${names[@]}" expert_gemm_bench
  # The expert GEMM against plain cuBLAS (one GPU): rows per expert of decode and prefill.
  if [ "$dry" = 1 ] || [ -x "$build/expert_gemm_bench" ]; then
    CUDA_VISIBLE_DEVICES=0 run_to "$out/expert-gemm.txt" "$(limit_of expert-gemm)" "$build/expert_gemm_bench" $((experts / ranks)) 8 64 256 512
    [ "$dry" = 1 ] || tee -a "$logfile" <"$out/expert-gemm.txt"
  fi
  for t in $tokens; do
    for s in $skews; do size_args+=(--size $((t * 10000 + experts * 10 + s))); done
  done
  fresh_dir "$out/results"
  bench_programs "$build" "$out/results" "$ranks" "$(limit_of run)" --mode bench --seed 1 --rtol 0.02 --atol 0.05 \
    --warmup "$warmup" --iters "$iters" --input_sets 2 "${size_args[@]}"
  bench_table "$wl/bench/table.py"
}

# ================================================================ bench ring-attention
spec_bench_ring_attention() {
  bench_opts RING ring-attention-out build-ring-bench
  variants_opt RING
  opt --ranks ranks BRAID_RING_RANKS "" "1: the block kernel vs PyTorch; >= 2: programs under the harness (default 2, or 1 on one GPU)"
  opt --seqs seqs BRAID_RING_SEQS 8192,16384,32768,65536 "(ranks 1) sequence lengths"
  opt --hkv hkv BRAID_RING_HKV 8,32 "(ranks 1) key / value heads"
  opt --causal causal BRAID_RING_CAUSAL 0,1 "(ranks 1) causal masks"
  opt --sizes sizes BRAID_RING_SIZES 819232,1000819232,1638408,1001638408 "(ranks >= 2) harness sizes (ring_attention.cuh)"
  opt --extra extra BRAID_RING_EXTRA "" "(ranks >= 2) more programs, NAME=PATH.cu ... (goal ring-attention's seed<N>-best.cu)"
  opt --iters iters BRAID_RING_ITERS 10 "timed iterations"
  opt --warmup warmup BRAID_RING_WARMUP 3 "warm-up iterations"
  opt --steps steps_ranks BRAID_RING_STEPS "" "(ranks 1) also block_bench steps for these P (e.g. \"2,4\"): the bound's one call vs a ring's per-step calls"
  opt --steps-seqs steps_seqs BRAID_RING_STEPS_SEQS 8192,16384 "(--steps) sequence lengths"
  limit kernel 180; limit run 400
}
# block_bench steps' "steps_makespan" lines as a table.
steps_table() {  # steps.log
  echo "| S | Hkv | causal | P | one call ms | per-step ms | per-step, masked skipped ms | per-step / one | skipped / one | swap copy ms (1-GPU proxy) |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  awk '$1 == "steps_makespan" { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $2, $3, ($4 ? "yes" : "no"), $5, $6, $7, $8, $9, $10, $11 }' "$1"
}
flags_ring_attention() {
  echo "-I$root/workloads/ring_attention"
  case $1 in block_bench) echo -DRING_ATTENTION_ROW_TILES=1 ;; block_bench_rt2) echo -DRING_ATTENTION_ROW_TILES=2 ;; esac
}
cmd_bench_ring_attention() {
  local wl=$root/workloads/ring_attention s size_args=() b vrc start args
  bench_start
  ranks=${ranks:-$((gpus >= 2 ? 2 : 1))}
  log "== $(machine_line); nvcc $BRAID_NVCC; ranks $ranks"
  [ "$gpus" -ge 1 ] || { log "FAIL: no GPU"; exit 1; }
  check_ranks "$ranks"
  make_dir "$build"
  link_extra=()
  if [ "$ranks" = 1 ]; then
    # The workload's kernel (block_bench) and its two-row-tile form (block_bench_rt2), both checked
    # against the fp32 reference first, then timed; PyTorch's flash SDPA at the same shapes.
    x cp "$wl/bench/block_bench.cu" "$build/block_bench.cu"
    x cp "$wl/bench/block_bench.cu" "$build/block_bench_rt2.cu"
    build_programs "$build" "$out" flags_ring_attention block_bench block_bench_rt2
    if [ "$dry" = 0 ] && ! { [ -x "$build/block_bench" ] && [ -x "$build/block_bench_rt2" ]; }; then
      log "FAIL: build of block_bench (see $out/build-block_bench*.log)"
      exit 1
    fi
    args=(--seqs "$seqs" --hkv "$hkv" --causal "$causal" --iters "$iters" --warmup "$warmup")
    [ "$dry" = 1 ] || : >"$out/kernel.log"
    for b in block_bench block_bench_rt2; do
      run_to "$out/verify-$b.log" "$(limit_of kernel)" "$build/$b" verify
      vrc=$?
      if [ "$dry" = 0 ]; then
        log "verify $b: $(tail -1 "$out/verify-$b.log")"
        if [ $vrc != 0 ]; then
          grep FAIL "$out/verify-$b.log" | head -5 | tee -a "$logfile"
          [ $b = block_bench ] && exit 1
          continue # the two-row-tile form is only timed when it is right
        fi
      fi
      start=$(date +%s)
      run_to "$out/kernel-$b.log" "$(limit_of kernel)" "$build/$b" bench "${args[@]}"
      local rc=$?
      [ "$dry" = 1 ] || { cat "$out/kernel-$b.log" >>"$out/kernel.log"; log "$b: rc=$rc in $(since "$start")"; }
    done
    start=$(date +%s)
    run_to "$out/torch.log" "$(limit_of kernel)" python3 "$wl/bench/torch_sdpa.py" "${args[@]}"
    local trc=$?
    local krc=0
    if [ "$dry" = 1 ]; then
      x python3 "$wl/bench/kernel_table.py" "$out/kernel.log" "$out/torch.log"
    else
      log "torch: rc=$trc in $(since "$start") $(head -1 "$out/torch.log")"
      python3 "$wl/bench/kernel_table.py" "$out/kernel.log" "$out/torch.log" | tee "$out/table.md"
      krc=${PIPESTATUS[0]}
    fi
    if [ -n "$steps_ranks" ]; then
      start=$(date +%s)
      run_to "$out/steps.log" "$(limit_of kernel)" "$build/block_bench" steps --seqs "$steps_seqs" --hkv "$hkv" --causal "$causal" \
        --ranks "$steps_ranks" --iters "$iters" --warmup "$warmup"
      local src=$?
      [ "$dry" = 1 ] || { log "steps: rc=$src in $(since "$start")"; steps_table "$out/steps.log" | tee "$out/steps.md"; }
      [ $src = 0 ] || krc=$src
    fi
    [ "$dry" = 1 ] && return 0
    exit "$krc"
  fi
  # ranks >= 2: programs under the frozen harness, every rank's output against the unsplit reference.
  names=(seed gen0_default)
  x cp "$wl/seed.cu" "$build/seed.cu"
  x cp "$wl/gen0.cu" "$build/gen0_default.cu"
  add_variants "$build" "$wl/gen0.cu" "$wl/bench/variants.txt" "$variants"
  add_extra "$build" "$extra"
  build_programs "$build" "$out" flags_ring_attention "${names[@]}"
  for s in ${sizes//,/ }; do size_args+=(--size "$s"); done
  fresh_dir "$out/results"
  bench_programs "$build" "$out/results" "$ranks" "$(limit_of run)" --mode bench --seed 1 --rtol 0.02 --atol 0.004 \
    --warmup 2 --iters "$iters" "${size_args[@]}"
  bench_table "$wl/bench/table.py"
}

# ================================================================ bench serving-kernels
spec_bench_serving_kernels() {
  bench_opts SK serving-kernels-out build-serving-bench
  switch --quick quick BRAID_SK_QUICK "2 shapes per op (decode-sized and the largest), fewer iterations (~1.5 min)"
  switch --verify verify BRAID_SK_VERIFY "correctness only: seed, gen0 and --samples other knob vectors per op, every shape"
  opt --samples samples BRAID_SK_SAMPLES 4 "(--verify) sampled knob vectors per op (the first: every knob at its last value)"
  opt --sample-seed sample_seed BRAID_SK_SAMPLE_SEED 1 "(--verify) RNG seed of the samples and the inputs"
  opt --ops ops BRAID_SK_OPS "add_rmsnorm silu_mul rope softmax" "ops"
  list --best best "" "OP=PATH.cu or OP=\"knob vector\" of its gen0.cu: the op's best (repeat; also BRAID_SK_BEST_<op>)"
  opt --evolve evolve BRAID_SK_EVOLVE 0 "first a knob-mutator evolve of N evaluations per op; its best is the op's best"
  opt --seed evolve_seed BRAID_SK_EVOLVE_SEED 1 "RNG seed of that evolve"
  opt --braid braid_bin BRAID_BIN "" "the braid binary (default .device-carry/bin/braid, build/braid)"
  opt --torch torch BRAID_SK_TORCH 1 "0: skip PyTorch"
  opt --compile compile BRAID_SK_COMPILE 1 "0: torch eager only"
  opt --iters iters BRAID_SK_ITERS "" "timed iterations (default 30, --quick 20)"
  opt --warmup warmup BRAID_SK_WARMUP 5 "warm-up iterations"
  limit run 180; limit evolve 900; limit torch 300
}
sk_family=$root/workloads/serving_kernels
flags_serving_kernels() { echo "-I$sk_family/$(dirname "$1")"; echo "-I$sk_family/common"; }
# The sizes of an op: its workload.yaml's --size values; --quick keeps the first and the last.
sk_sizes() {
  local all
  all=$(grep -E '^\s*args:' "$sk_family/$1/workload.yaml" | grep -oE -- '--size [0-9]+' | awk '{print $2}')
  # shellcheck disable=SC2086
  [ "$quick" = 1 ] && all=$(printf '%s\n' $all | sed -n '1p;$p' | sort -un)
  # shellcheck disable=SC2086
  echo $all
}
sk_tolerances() { grep -E '^\s*args:' "$sk_family/$1/workload.yaml" | grep -oE -- '--(rtol|atol) [^ "]+' | tr '\n' ' '; }
sk_best_of() {  # op: --best OP=..., else BRAID_SK_BEST_<op>
  local line var="BRAID_SK_BEST_$1"
  while IFS= read -r line; do [ "${line%%=*}" = "$1" ] && { echo "${line#*=}"; return; }; done <<<"$best"
  echo "${!var:-}"
}
cmd_bench_serving_kernels() {
  local op job i knobs b start rc ok=0 run_dir size_args tol jobs=() torch_json torch_sizes=()
  declare -A evolved=()
  # No GPU: say so and exit 77 (ctest's skip code for the serving_kernels_verify test).
  if [ "$dry" = 0 ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo "SKIP: no GPU (nvidia-smi -L lists none)"; exit 77; fi
  iters=${iters:-$([ "$quick" = 1 ] && echo 20 || echo 30)}
  bench_start
  make_dir "$build"
  log "== $(machine_line); nvcc $BRAID_NVCC; ops: $ops; quick=$quick"
  if [ "$verify" = 0 ] && [ "$evolve" -gt 0 ]; then
    local braid
    braid=$(braid_binary "$braid_bin")
    for op in $ops; do
      run_dir=$out/evolve-$op
      [ "$dry" = 1 ] || rm -rf "$run_dir"
      start=$(date +%s)
      run_to "$out/evolve-$op.log" "$(limit_of evolve)" "$braid" evolve "$sk_family/$op" --llm none -g "$evolve" -s "$evolve_seed" -r "$run_dir"
      rc=$?
      [ "$dry" = 1 ] || log "evolve $op: rc=$rc in $(since "$start") ($evolve evaluations)"
      if [ "$dry" = 1 ]; then
        x "$braid" export "$run_dir" -o "$build/evolved_$op.cu"
        evolved[$op]=$build/evolved_$op.cu
      elif "$braid" export "$run_dir" -o "$build/evolved_$op.cu" >>"$logfile" 2>&1; then
        evolved[$op]=$build/evolved_$op.cu
      fi
    done
  fi
  # Sources: gen0 (default knobs), and the op's best; --verify: the seed and sampled knob vectors.
  for op in $ops; do
    [ -d "$sk_family/$op" ] || { log "FAIL: no workload $sk_family/$op"; continue; }
    make_dir "$build/$op"
    x cp "$sk_family/$op/gen0.cu" "$build/$op/gen0.cu"
    jobs+=("$op/gen0")
    if [ "$verify" = 1 ]; then
      x cp "$sk_family/$op/seed.cu" "$build/$op/seed.cu"
      jobs+=("$op/seed")
      i=0
      while read -r knobs; do
        i=$((i + 1))
        # shellcheck disable=SC2086
        x python3 "$make_variant" "$sk_family/$op/gen0.cu" "$build/$op/sample$i.cu" $knobs &&
          { [ "$dry" = 1 ] || echo "$knobs" >"$build/$op/sample$i.knobs"; } && jobs+=("$op/sample$i")
      done < <(python3 "$sk_family/bench/sample_knobs.py" "$sk_family/$op/gen0.cu" "$samples" "$sample_seed")
      continue
    fi
    b=${evolved[$op]:-$(sk_best_of "$op")}
    [ -n "$b" ] || continue
    if [ -f "$b" ] || [ -n "${evolved[$op]:-}" ]; then
      x cp "$b" "$build/$op/best.cu" && jobs+=("$op/best")
    else
      # shellcheck disable=SC2086
      x python3 "$make_variant" "$sk_family/$op/gen0.cu" "$build/$op/best.cu" $b && jobs+=("$op/best") || log "FAIL: $op: knob vector '$b'"
    fi
  done
  link_extra=()
  build_programs "$build" "$out" flags_serving_kernels "${jobs[@]}"
  fresh_dir "$out/results"
  # One process per program (1 rank), every size verified.
  for job in "${jobs[@]}"; do
    op=$(dirname "$job")
    [ "$dry" = 1 ] || [ -x "$build/$job" ] || { [ "$verify" = 1 ] && log "$job: BUILD FAILED ($out/build-${job//\//_}.log)"; continue; }
    size_args=()
    for i in $(sk_sizes "$op"); do size_args+=(--size "$i"); done
    read -ra tol <<<"$(sk_tolerances "$op")"
    start=$(date +%s)
    if [ "$verify" = 1 ]; then
      launch_ranks "${job//\//_}" 1 "$(limit_of run)" "$out/results/$job" "$build/$job" --mode verify --seed "$sample_seed" \
        "${tol[@]}" "${size_args[@]}" --results_dir "$out/results/$job"
      rc=$?
      [ "$dry" = 1 ] && continue
      [ $rc = 0 ] && ok=$((ok + 1))
      log "$job: rc=$rc $(tr '\n' ' ' <"$out/results/$job/rank0.log" | head -c 400) $(cat "$build/$job.knobs" 2>/dev/null)"
    else
      launch_ranks "${job//\//_}" 1 "$(limit_of run)" "$out/results/$job" "$build/$job" --mode bench --seed 1 "${tol[@]}" \
        --warmup "$warmup" --iters "$iters" --input_sets 2 "${size_args[@]}" --results_dir "$out/results/$job"
      rc=$?
      [ "$dry" = 1 ] || log "$job: rc=$rc in $(since "$start") $(head -c 300 "$out/results/$job/rank0.log" | tr '\n' ' ')"
    fi
  done
  if [ "$verify" = 1 ]; then
    [ "$dry" = 1 ] && return 0
    log "verify: $ok of ${#jobs[@]} correct"
    [ $ok = ${#jobs[@]} ]
    exit
  fi
  # PyTorch eager and torch.compile, when torch with CUDA is present.
  torch_json=$out/torch.json
  [ "$dry" = 1 ] || rm -f "$torch_json"
  if [ "$torch" != 0 ] && { [ "$dry" = 1 ] || python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; }; then
    for op in $ops; do torch_sizes+=(--sizes "$op=$(sk_sizes "$op" | tr ' ' ',')"); done
    local no_compile=()
    [ "$compile" = 0 ] && no_compile=(--no-compile)
    start=$(date +%s)
    run_to "$out/torch.log" "$(limit_of torch)" python3 "$sk_family/bench/torch_ops.py" --ops "$(echo "$ops" | tr ' ' ',')" "${torch_sizes[@]}" \
      --iters "$iters" --warmup "$warmup" "${no_compile[@]}" --out "$torch_json"
    rc=$?
    [ "$dry" = 1 ] || log "torch eager / torch.compile: rc=$rc in $(since "$start")"
  else
    log "torch: not run (--torch 0, or torch with CUDA missing)"
  fi
  bench_table "$sk_family/bench/table.py" --torch "$torch_json"
}

# ================================================================ goal <workload>
# Evaluations-to-target of the knob-mutator search: one `braid evolve --llm none` per RNG seed that
# stops at the workload's bench/goal.yaml (with its confirmation re-runs), the table of every
# evaluation (evolve_summary.py at the goal's ratio and the workload's timed sizes), and the run's
# best program exported as OUT/seed<N>-best.cu for the workload's bench (--extra). GPUs: all, or
# those CUDA_VISIBLE_DEVICES names (braid leases only those).
goal_spec() {  # default-out
  common_opts "$1"
  synopsis=" [SEED...]"
  opt --seeds seeds BRAID_GOAL_SEEDS "1 2 3" "RNG seeds, one evolve each (also as arguments)"
  opt --ranks ranks BRAID_GOAL_RANKS "" "ranks (default: workload.yaml's 2)"
  opt --evals evals BRAID_GOAL_EVALS 60 "at most this many evaluations per seed"
  opt --braid braid_bin BRAID_BIN "" "the braid binary (default .device-carry/bin/braid, build/braid)"
  switch --resume resume BRAID_GOAL_RESUME "continue a seed's run cut by its time limit (OUT/seed<N> kept) with braid resume; a fresh run where none is"
  limit seed 560
}
spec_goal_gemm_allgather() { goal_spec gemm-allgather-goal-out; }
spec_goal_kv_transfer() { goal_spec kv-transfer-goal-out; }
spec_goal_moe() { goal_spec moe-goal-out; }
spec_goal_ring_attention() { goal_spec ring-attention-goal-out; }
cmd_goal_gemm_allgather() { goal_run gemm_allgather 1.05 4096,8192,16384 "$@"; }
cmd_goal_kv_transfer() { goal_run kv_transfer 1.10 40961024,10242048,163842048 "$@"; }
cmd_goal_moe() { goal_run moe 1.10 1280321,1280322,1280323,1280325,40960321,40960322,40960323,40960325 "$@"; }
cmd_goal_ring_attention() { goal_run ring_attention 1.10 819232,1000819232,1001638408 "$@"; }
goal_run() {  # workload target sizes [SEED...]
  local wl=$1 target=$2 sizes=$3 braid seed dir start rc
  shift 3
  [ $# -gt 0 ] && seeds="$*"
  make_dir "$out"
  gpu_env
  braid=$(braid_binary "$braid_bin")
  [ -n "$braid" ] || { echo "FAIL: no braid binary (--braid, .device-carry/bin/braid or build/braid)"; exit 1; }
  LD_LIBRARY_PATH="$(dirname "$braid")/lib:$LD_LIBRARY_PATH"
  export LD_LIBRARY_PATH
  for seed in $seeds; do
    dir=$out/seed$seed
    start=$(date +%s)
    # A run longer than one call of a lent machine (4+ ranks: ~15 s an evaluation) goes on where
    # the last call's time limit cut it: every evaluated candidate is in its database.
    if [ "$resume" = 1 ] && { [ "$dry" = 1 ] || [ -f "$dir/evolution.db" ]; }; then
      run_to "$out/seed$seed.resume.log" "$(limit_of seed)" "$braid" resume "$dir" -g "$evals"
      rc=$?
      [ "$dry" = 1 ] || cat "$out/seed$seed.resume.log" >>"$out/seed$seed.log"
    else
      [ "$dry" = 1 ] || rm -rf "$dir"
      run_to "$out/seed$seed.log" "$(limit_of seed)" "$braid" evolve "workloads/$wl" --llm none -g "$evals" -s "$seed" \
        -r "$dir" ${ranks:+--ranks "$ranks"} -c "workloads/$wl/bench/goal.yaml"
      rc=$?
    fi
    [ "$dry" = 1 ] && { x python3 workloads/gemm_allgather/bench/evolve_summary.py "$dir" --target "$target" --sizes "$sizes"; continue; }
    echo "seed $seed: rc=$rc in $(since "$start"); $(grep -o 'target reached[^]]*' "$out/seed$seed.log" | tail -1)"
    python3 workloads/gemm_allgather/bench/evolve_summary.py "$dir" --target "$target" --sizes "$sizes" >"$out/seed$seed.md" 2>&1
    tail -2 "$out/seed$seed.md"
    "$braid" export "$dir" -o "$out/seed$seed-best.cu" >/dev/null 2>&1 || echo "seed $seed: no best program to export"
  done
}

# ================================================================ scale
# Scaling of the search itself: one time-boxed `braid evolve --llm none` per GPU count G (GPUs
# 0..G-1 visible, G/R leases of R ranks, JOBS_PER_LEASE evaluations in flight per lease, since
# builds hold no GPU), then the table of search_scaling.py: evaluations per hour against G/R times
# the one-lease rate. The workload is copied with bench_exclusive set as asked: true (its
# default) keeps benches on a node one at a time, so adding GPUs only overlaps builds and verifies.
spec_scale() {
  common_opts search-scaling-out
  opt --workload scale_wl BRAID_SCALE_WORKLOAD workloads/serving_kernels/softmax "workload folder"
  opt --gpu-counts gpu_counts BRAID_SCALE_GPUS "1 2 4 8" "GPU counts (those above this machine's are skipped)"
  opt --ranks ranks BRAID_SCALE_RANKS 1 "ranks per evaluation"
  opt --seconds secs BRAID_SCALE_SECONDS 120 "wall time of each run (then SIGINT)"
  opt --jobs-per-lease jpl BRAID_SCALE_JOBS_PER_LEASE 3 "max_parallel_jobs per lease of R GPUs"
  opt --exclusive excl BRAID_SCALE_EXCLUSIVE false "bench_exclusive of the copied workload (true: the default of every workload)"
  opt --braid braid_bin BRAID_BIN "" "the braid binary (default .device-carry/bin/braid, build/braid)"
}
cmd_scale() {
  local braid wl_parent wl_name wl g dir start rc leases runs=() visible
  make_dir "$out"
  logfile=$out/scale.log
  [ "$dry" = 1 ] || : >"$logfile"
  gpu_env
  gpus=$(gpu_count)
  braid=$(braid_binary "$braid_bin")
  [ -n "$braid" ] || { log "FAIL: no braid binary (--braid, .device-carry/bin/braid or build/braid)"; exit 1; }
  LD_LIBRARY_PATH="$(dirname "$braid")/lib:$LD_LIBRARY_PATH"
  export LD_LIBRARY_PATH
  [ -f "$scale_wl/workload.yaml" ] || die "--workload $scale_wl: no workload.yaml there"
  case $excl in true | false) ;; *) die "--exclusive $excl: true or false" ;; esac
  for g in $gpu_counts $ranks $secs $jpl; do [[ $g =~ ^[1-9][0-9]*$ ]] || die "scale: '$g' is not a positive whole number (--gpu-counts, --ranks, --seconds, --jobs-per-lease)"; done
  # The workload's parent is copied whole: includes such as ../common stay valid.
  wl_parent=$(cd "$scale_wl/.." && pwd) wl_name=$(basename "$scale_wl")
  fresh_dir "$out/workload"
  x cp -r "$wl_parent/." "$out/workload/"
  wl=$out/workload/$wl_name
  if [ "$dry" != 1 ]; then
    sed -i '/^  bench_exclusive:/d' "$wl/workload.yaml"
    sed -i "s|^  kind: gpu|  kind: gpu\n  bench_exclusive: $excl|" "$wl/workload.yaml"
    grep -q "^  bench_exclusive: $excl" "$wl/workload.yaml" || die "could not set bench_exclusive in $wl/workload.yaml"
  fi
  log "$(machine_line); workload $scale_wl, $ranks rank(s) per evaluation, bench_exclusive $excl, $secs s per run"
  for g in $gpu_counts; do
    [ "$g" -le "$gpus" ] || { log "G=$g: skipped ($gpus GPUs here)"; continue; }
    [ $((g % ranks)) -eq 0 ] || { log "G=$g: skipped (not a multiple of $ranks ranks)"; continue; }
    leases=$((g / ranks))
    visible=$(seq -s, 0 $((g - 1)))
    dir=$out/run-g$g
    [ "$dry" = 1 ] || rm -rf "$dir"
    start=$(date +%s)
    # SIGINT ends the run as a user's Ctrl-C does: evaluations in flight finish or are dropped, the
    # evaluated ones are stored.
    run_to "$out/run-g$g.log" "$secs" env CUDA_VISIBLE_DEVICES="$visible" "$braid" evolve "$wl" --llm none -g 100000 -s 1 -r "$dir" \
      --ranks "$ranks" -j $((leases * jpl))
    rc=$?
    [ "$dry" = 1 ] || log "G=$g ($leases lease(s), -j $((leases * jpl))): rc=$rc in $(since "$start")"
    runs+=("$g=$start=$dir")
  done
  x python3 "$root/bench/search_scaling.py" --ranks "$ranks" --seconds "$secs" "${runs[@]}" | { if [ "$dry" = 1 ]; then cat; else tee -a "$logfile"; fi; }
}

# ================================================================ quick
spec_quick() {
  common_opts multi-gpu-out
  opt --ranks ranks BRAID_QUICK_RANKS "" "ranks (default: the GPUs rounded down to 2, 4 or 8)"
  limit test 45; limit bench 60; limit goal 230; limit torch 80; limit cascade 90
}
cmd_quick() {
  local bin=$root/.device-carry/bin goal qlog
  make_dir "$out"
  gpu_env
  gpus=$(gpu_count)
  ranks=${ranks:-$(ranks_for "$gpus")}
  qlog=$out/check.log
  # A step: its output appended to check.log, its rc line to summary.txt; OUT keeps a handful of
  # files (check.log, summary.txt, allgather.csv, torch.json, seed1.md, seed1.log).
  step() {  # name seconds command...
    local name=$1 secs=$2 start rc
    shift 2
    start=$(date +%s)
    if [ "$dry" = 1 ]; then echo "$(show timeout "$secs" "$@") >>$qlog"; return 0; fi
    echo "== $name" >>"$qlog"
    timed -k 5 "$secs" "$@" >>"$qlog" 2>&1
    rc=$?
    echo "$name: rc=$rc in $(since "$start")" | tee -a "$out/summary.txt"
  }
  [ "$dry" = 1 ] || { nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -10; echo "ranks $ranks"; } >>"$qlog"
  step primitives "$(limit_of test)" "$bin/gpu_test_primitives"
  step harness "$(limit_of test)" "$bin/gpu_test_harness"
  step bench_allgather "$(limit_of bench)" "$bin/bench_allgather" --min_mib 1 --max_mib 1024 --reps 11 --quick --csv "$out/allgather.csv"
  goal=$out/goal
  [ "$dry" = 1 ] || goal=$(mktemp -d)
  step goal_evolve $(($(limit_of goal) + 20)) "$self" goal gemm-allgather --seeds 1 --ranks "$ranks" --timeout "seed=$(limit_of goal)" --out "$goal"
  [ "$dry" = 1 ] || cp "$goal/seed1.md" "$goal/seed1.log" "$out/" 2>/dev/null
  step torch_fused "$(limit_of torch)" python3 -m torch.distributed.run --standalone --nproc_per_node="$ranks" \
    workloads/gemm_allgather/bench/torch_fused.py --sizes 4096,8192,16384 --iters 20 --warmup 3 --out "$out/torch.json"
  step cascade "$(limit_of cascade)" "$bin/gpu_cascade_test" --source_dir "$root" --out "$([ "$dry" = 1 ] && echo "$out/cascade" || mktemp -d)" --ranks "$ranks"
  [ "$dry" = 1 ] && return 0
  grep -h "rank 0:\|ALL PASSED\|FAIL" "$qlog" | head -20
  grep -h "^PASS\|^FAIL\|quarantined" "$qlog" | tail -12
  grep -h "^|" "$qlog"
  tail -3 "$out/seed1.md" 2>/dev/null
  cat "$out/summary.txt"
}

# ================================================================ bundle
spec_bundle() {
  common_opts .device-carry
  opt --build build BRAID_BUILD_DIR build "the braid build folder holding the binaries"
}
# For a GPU machine that has CUDA, cuBLAS, nvcc and the NCCL wheel but none of our Debian -dev
# libraries: stripped binaries built here, the non-system shared libraries they load (lib/ beside
# them: rpath $ORIGIN/lib), and NCCL's device headers for when the wheel there lacks them.
cmd_bundle() {
  local exe lib system='linux-vdso|ld-linux|libc\.so|libresolv|libutil|libnss|libm\.so|libstdc\+\+|libgcc_s|libpthread|libdl\.so|librt\.so|libcuda\.so|libcudart|libcublas|libnccl'
  [ "$dry" = 1 ] || { rm -rf "${out:?}/bin" && mkdir -p "$out/bin/lib"; }
  for exe in "$build/braid" "$build/tests/gpu/gpu_test_primitives" "$build/tests/gpu/gpu_test_harness" "$build/tests/gpu/gpu_test_redteam" \
    "$build/tests/gpu/gpu_test_harness_report" "$build/device/bench_allgather" "$build/device/bench_gemm_split_probe" \
    "$build/tests/gpu/cascade/gpu_cascade_test" "$build/tests/rewrite_gate_driver" "$build/tests/annotate_gate_driver" \
    "$build/tests/test_cli" "$build/tests/profile_prompt_driver"; do
    [ "$dry" = 1 ] && { x strip -o "$out/bin/$(basename "$exe")" "$exe"; continue; }
    [ -x "$exe" ] || { echo "bundle: missing $exe (build it first)"; exit 1; }
    strip -o "$out/bin/$(basename "$exe")" "$exe" || exit 1
    { ldd "$exe" | awk '/=> \// {print $3}' | grep -Ev "$system" || true; } | while read -r lib; do cp -Lf "$lib" "$out/bin/lib/"; done
  done
  # shellcheck source=scripts/find-cuda.sh
  source "$root/scripts/find-cuda.sh"
  x mkdir -p "$out/nccl-include"
  x cp -r "$BRAID_NCCL_INCLUDE"/nccl.h "$BRAID_NCCL_INCLUDE"/nccl_device.h "$BRAID_NCCL_INCLUDE"/nccl_device "$out/nccl-include/" || exit 1
  [ "$dry" = 1 ] || du -sh "$out"
}

# ================================================================ env
spec_env() { common_opts ""; }
cmd_env() {
  gpu_env
  local v
  for v in BRAID_CUDA_HOME BRAID_NVCC BRAID_NCCL_INCLUDE BRAID_NCCL_LIB BRAID_NCCL_WHEEL BRAID_DEVICE_INCLUDE NCCL_NVLS_ENABLE LD_LIBRARY_PATH; do
    echo "$v=${!v:-}"
  done
  [ -z "$braid_gpu_env_missing" ] || { echo "missing: $braid_gpu_env_missing"; exit 1; }
}

# ================================================================ main
main() {
  local cmd line pre=() known=0 help=0
  # --dry-run may come before the subcommand too.
  while [ $# -gt 0 ] && [ "$1" = --dry-run ]; do pre+=("$1"); shift; done
  [ $# -gt 0 ] || { usage; exit 2; }
  case $1 in help | -h | --help) help=1; shift; [ $# -gt 0 ] || { usage; exit 0; } ;; esac
  cmd=$1
  shift
  case $cmd in
    bench | goal)
      if [ $# -eq 0 ] || [[ $1 == -* ]]; then
        die "$cmd needs a workload: $(for line in "${commands[@]}"; do [ "${line%% *}" = "$cmd" ] && line=${line%%|*} && printf '%s ' "${line#* }"; done)"
      fi
      cmd="$cmd $1"
      shift
      ;;
  esac
  for line in "${commands[@]}"; do [ "${line%%|*}" = "$cmd" ] && known=1; done
  [ $known = 1 ] || die "unknown subcommand '$cmd' (scripts/gpu.sh help)"
  load_spec "$cmd"
  [ $help = 0 ] || { usage_of "$cmd"; exit 0; }
  parse_opts "$cmd" "${pre[@]}" "$@"
  [ -n "$synopsis" ] || [ ${#positional[@]} -eq 0 ] || die "$cmd takes no argument ${positional[0]} (scripts/gpu.sh $cmd --help)"
  "cmd_$(fn_of "$cmd")" "${positional[@]}"
}
main "$@"
