#!/usr/bin/env bash
# CTest `cpu`: scripts/gpu.sh without a GPU. Its help lists every subcommand with its options; bad
# options and subcommands are refused (exit 2); dry runs say what would run and write nothing:
# `check` runs every GPU test, the benchmarks, the cascade, the evolve, one convert per program and
# the gates at the ranks the GPU count gives; a flag wins over its environment fallback, which wins
# over the default; --timeout reaches the launch; scripts/gpu-check.sh is `gpu.sh check`.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd -P)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() {  # name got want
  if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: got '$2', want '$3'"; fails=$((fails + 1)); fi
}
# A fake CUDA with NCCL's headers and library, found by the bash search (no braid binary needed).
cuda=$tmp/cuda
mkdir -p "$cuda/bin" "$cuda/include" "$cuda/lib64"
printf '#!/bin/sh\n' >"$cuda/bin/nvcc" && chmod +x "$cuda/bin/nvcc"
touch "$cuda/include/nccl.h" "$cuda/include/nccl_device.h" "$cuda/lib64/libnccl.so.2"
gpu() { env -i PATH="$PATH" HOME="$tmp" CUDA_HOME="$cuda" BRAID_FIND_CUDA_BASH=1 "$@"; }
out=$tmp/out
run() { gpu "$@" bash "$src/scripts/gpu.sh" "${args[@]}" --out "$out" 2>&1; }  # [env...] with args=(...)
count() { grep -c -- "$1"; }

expect "bash -n" "$(bash -n "$src/scripts/gpu.sh" && echo ok)" ok
help=$(gpu bash "$src/scripts/gpu.sh" help)
expect "help: exit 0" $? 0
for c in check "bench gemm-allgather" "bench kv-transfer" "bench moe" "bench ring-attention" "bench serving-kernels" \
  "goal gemm-allgather" "goal kv-transfer" "goal moe" "goal ring-attention" scale quick gates convert-gate bundle env; do
  expect "help lists '$c'" "$(echo "$help" | grep -c "^scripts/gpu.sh $c \[options\]")" 1
done
expect "help names each option's fallback" "$(echo "$help" | grep -c -- '--experts V .*\[BRAID_MOE_EXPERTS\]')" 1
expect "<subcommand> --help: that one only" "$(gpu bash "$src/scripts/gpu.sh" bench moe --help | grep -c '^scripts/gpu.sh')" 1
gpu bash "$src/scripts/gpu.sh" check --no-such-flag >/dev/null 2>&1
expect "unknown option: exit 2" $? 2
gpu bash "$src/scripts/gpu.sh" frobnicate >/dev/null 2>&1
expect "unknown subcommand: exit 2" $? 2
gpu bash "$src/scripts/gpu.sh" bench >/dev/null 2>&1
expect "bench without a workload: exit 2" $? 2
gpu bash "$src/scripts/gpu.sh" check --timeout nosuch=5 --dry-run >/dev/null 2>&1
expect "--timeout with an unknown name: exit 2" $? 2

args=(check --dry-run --gpus 4)
check=$(run)
expect "check: exit 0" $? 0
for t in gpu_test_primitives gpu_test_harness gpu_test_harness_report gpu_test_redteam bench_gemm_split_probe; do
  expect "check runs $t" "$(echo "$check" | count "/$t ")" 1
done
expect "check: bench_allgather's default sweep" "$(echo "$check" | count 'bench_allgather --min_mib 1 --max_mib 1024 --reps 15')" 1
expect "check: cascade at 4 ranks" "$(echo "$check" | count 'gpu_cascade_test .*--ranks 4')" 1
expect "check: evolve and rebench" "$(echo "$check" | grep -cE 'braid (evolve workloads/gemm_allgather|rebench)')" 2
programs=$(($(find "$src/tests/convert/corpus" -maxdepth 1 -name "*.cu" | wc -l) + 1))
expect "check: one convert per program, 4 ranks" "$(echo "$check" | count 'convert .* --verify --ranks 4')" "$programs"
expect "check: rewrite, annotate and braid run gates" "$(echo "$check" | grep -cE 'rewrite_gate_test.sh|gpu.sh gates (gate|run) .*--ranks 4')" 3
expect "check: writes nothing in a dry run" "$([ -e "$out" ] && echo wrote || echo none)" none
expect "gpu-check.sh is gpu.sh check" "$(gpu bash "$src/scripts/gpu-check.sh" --dry-run --gpus 4 --out "$out" 2>&1)" "$check"
args=(check --dry-run --gpus 1)
expect "check on one GPU: no gates" "$(run | count 'skipped (fewer than 2 GPUs)')" 1

args=(bench gemm-allgather --dry-run --gpus 4 --variants none --torch 0 --build "$tmp/b")
expect "bench: the default ranks" "$(run | count '^+ ranks 0\.\.1: ')" 1
expect "bench: the environment over the default" "$(run BRAID_GAG_RANKS=4 | count '^+ ranks 0\.\.3: ')" 1
args+=(--ranks 2)
expect "bench: the flag over the environment" "$(run BRAID_GAG_RANKS=4 | count '^+ ranks 0\.\.1: ')" 1
args+=(--timeout run=7)
expect "bench: --timeout reaches the launch" "$(run | count "timeout 7 $tmp/b/seed --mode bench")" 1
args=(bench gemm-allgather --dry-run --gpus 4 --variants none --torch 0 --build "$tmp/b" --ranks 8)
run >/dev/null
expect "bench: more ranks than GPUs fails" $? 1
args=(bench kv-transfer --dry-run --gpus 1 --variants none --build "$tmp/b")
expect "kv-transfer on one GPU: one rank" "$(run | count '^+ ranks 0\.\.0: ')" 1
args=(bench ring-attention --dry-run --gpus 1 --build "$tmp/b")
expect "ring-attention on one GPU: both kernel forms verified" "$(run | grep -cE 'block_bench(_rt2)? verify')" 2
args=(bench ring-attention --dry-run --gpus 1 --build "$tmp/b" --steps 2,4)
expect "ring-attention --steps: the one call vs per-step calls at P 2 and 4" "$(run | count 'block_bench steps --seqs 8192.*16384 .*--ranks 2.*4')" 1
args=(bench serving-kernels --dry-run --verify --samples 2 --build "$tmp/b")
expect "serving-kernels --verify: seed, gen0 and 2 samples of 4 ops" "$(run | count '--mode verify')" 16
args=(goal gemm-allgather --dry-run --ranks 4 --braid /bin/true 4 5)
expect "goal: one evolve per seed" "$(run | count 'evolve workloads/gemm_allgather .*--ranks 4 -c')" 2
args=(goal ring-attention --dry-run --ranks 4 --braid /bin/true --resume 3)
expect "goal --resume: braid resume of the seed's run" "$(run | count 'true resume .*/seed3 -g 60')" 1
args=(convert-gate --dry-run --braid /bin/true --out "$tmp/cg")
expect "convert-gate: the user corpus too (differential gate)" "$(run | count 'corpus_user/mpi_dp_grads.cu -I .*corpus_user/include -o')" 1
expect "convert-gate: MULTI_GPU programs built with it" "$(run | count 'llmc_style_trainer.cu -DMULTI_GPU')" 1
args+=(--no-user)
expect "convert-gate --no-user: annotated corpus and seed only" "$(run | count 'corpus_user/')" 0
args=(convert-gate --dry-run --braid /bin/true --out "$tmp/cg" --programs "seed mpi_dp_grads")
expect "convert-gate --programs: only those" "$(run | count ' convert ')" 2
expect "convert-gate --programs: the user program among them" "$(run | count 'corpus_user/mpi_dp_grads.cu')" 1
args=(goal moe --dry-run --braid /bin/true 7)
expect "goal moe: its goal.yaml and every timed size" "$(run | grep -c 'workloads/moe/bench/goal.yaml\|--target 1.10 --sizes 1280321.*40960325')" 2
args=(scale --dry-run --gpus 4 --ranks 2 --workload workloads/gemm_allgather --braid /bin/true)
scale=$(run)
expect "scale: one run per GPU count that takes whole leases" "$(echo "$scale" | grep -cE 'CUDA_VISIBLE_DEVICES=(0.,1|0.,1.,2.,3) /bin/true evolve .*/workload/gemm_allgather')" 2
expect "scale: G=1 skipped at 2 ranks, 8 beyond the machine" "$(echo "$scale" | grep -cE 'G=(1|8): skipped')" 2
expect "scale: jobs per lease times leases" "$(echo "$scale" | grep -cE 'run-g2 --ranks 2 -j 3|run-g4 --ranks 2 -j 6')" 2
gpu bash "$src/scripts/gpu.sh" scale --dry-run --gpu-counts "1 two" --braid /bin/true --out "$out" >/dev/null 2>&1
expect "scale: a count that is no number: exit 2" $? 2
# The table from stored runs: two databases as braid writes them (only the columns read).
mkdir -p "$tmp/s1" "$tmp/s2"
for d in s1 s2; do
  python3 - "$tmp/$d/evolution.db" "$([ $d = s1 ] && echo 10 || echo 5)" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); step = float(sys.argv[2])
db.execute("CREATE TABLE programs (generation INT, created_at REAL, correct INT, timings TEXT, migrated_from TEXT)")
for i in range(11):  # the seed at t=100, then one evaluation every `step` s; one migrant copy
    db.execute("INSERT INTO programs VALUES (?, ?, 1, '{\"build\": 20, \"bench\": 2}', '')", (i, 100 + i * step))
db.execute("INSERT INTO programs VALUES (3, 101, 1, '{}', 'abc')")
db.commit()
PY
done
table=$(python3 "$src/bench/search_scaling.py" --seconds 120 1=90="$tmp/s1" 2=90="$tmp/s2")
expect "scaling table: steady rates and the ideal line" "$(echo "$table" | grep -cE '^\| 1 \| 1 \| 11 \| 11 \| 330 \| 360 \| 360 \| 1.00 \| 20.0 \| 2.0 \|$|^\| 2 \| 2 \| 11 \| 11 \| 330 \| 720 \| 720 \| 1.00 ')" 2
# A burst (every evaluation after the seed stored within a second of the 120 s run) has no steady rate.
mkdir -p "$tmp/s3"
python3 - "$tmp/s3/evolution.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE programs (generation INT, created_at REAL, correct INT, timings TEXT, migrated_from TEXT)")
for i in range(11):
    db.execute("INSERT INTO programs VALUES (?, ?, 1, '{}', '')", (i, 100 if i == 0 else 200 + i * 0.05))
db.commit()
PY
expect "scaling table: a burst has no steady rate" "$(python3 "$src/bench/search_scaling.py" --seconds 120 4=90="$tmp/s3" | grep -c '^| 4 | 4 | 11 | 11 | 330 | nan |')" 1
expect "writes nothing in dry runs" "$([ -e "$out" ] || [ -e "$tmp/b" ] && echo wrote || echo none)" none

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]
